"""Replay a trace on the runner target: the reference scheduler with the torch runner
executing every step it makes, judged as ``model.replay.replay_on_model`` judges."""
from __future__ import annotations

from ..model import BudgetConfig, BudgetPolicy
from ..model.replay import ReplayResult, replay_on_model
from ..spec.trace import Trace
from .target import RunnerOptions, RunnerTarget


def replay_on_runner(trace: Trace, options: RunnerOptions,
                     policy: str | None = None) -> tuple[ReplayResult, RunnerTarget | None]:
    """The replay's verdict and the target (its ``report``, its ``runner``); None when the
    config was refused."""
    built: list[RunnerTarget] = []

    def factory(cfg: BudgetConfig, pol: BudgetPolicy) -> RunnerTarget:
        built.append(RunnerTarget(cfg, pol, options))
        return built[-1]
    result = replay_on_model(trace, policy, factory)
    return result, built[0] if built else None
