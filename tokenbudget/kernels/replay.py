"""Replay a trace on the runner target: the reference scheduler with the torch runner
executing every step it makes, judged as the model target is (``model.base_gap.replay_judged``)."""
from __future__ import annotations

from ..model import BudgetConfig, BudgetPolicy
from ..model.replay import ReplayResult
from ..model.base_gap import replay_judged
from ..spec.trace import Trace
from .target import RunnerOptions, RunnerTarget


def replay_on_runner(trace: Trace, options: RunnerOptions,
                     policy: str | None = None, max_work_gap: int = 0) -> tuple[ReplayResult, RunnerTarget | None]:
    """The replay's verdict and the target (its ``report``, its ``runner``); None when the
    config was refused. ``max_work_gap``: as ``replay_judged`` judges a user policy."""
    built: list[RunnerTarget] = []

    def factory(cfg: BudgetConfig, pol: BudgetPolicy) -> RunnerTarget:
        built.append(RunnerTarget(cfg, pol, options))
        return built[-1]
    result = replay_judged(trace, policy, max_work_gap, factory)
    return result, built[0] if built else None
