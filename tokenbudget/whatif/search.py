"""The search for the workload on which two policies' latencies differ most: Hypothesis's
``target()`` over small synthetic workloads, the best found kept with the ops that replay it."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
from hypothesis import HealthCheck, Phase, given, seed as hypothesis_seed, settings, strategies as st, target

from ..model import BudgetConfig, BudgetPolicy
from ..spec.trace import Op, Trace
from . import metrics
from .simulator import CostModel, simulate
from .workload import RequestSpec, Workload


@dataclass
class Found:
    """The best workload so far: how much slower ``slow`` was than ``fast`` in mean TTFT
    (seconds), and the ops of its run under ``slow``."""

    gap_s: float = float("-inf")
    workload: Workload | None = None
    ops: list[Op] = field(default_factory=list)


def workloads(cfg: BudgetConfig, acceptance: tuple[float, ...]) -> st.SearchStrategy[Workload]:
    """1..8 requests, all sent at once or each after a gap, prompts up to max_model_len - 1."""
    request = st.tuples(st.floats(0, 0.5), st.integers(1, cfg.max_model_len - 1), st.integers(1, 64))

    def build(items: list[tuple[float, int, int]], concurrency: int | None) -> Workload:
        arrivals = np.cumsum([gap for gap, _, _ in items])
        return Workload(tuple(RequestSpec(f"r{i}", float(arrivals[i]), p, o) for i, (_, p, o) in enumerate(items)),
                        concurrency, acceptance, 0)
    return st.builds(build, st.lists(request, min_size=1, max_size=8), st.one_of(st.none(), st.integers(1, 8)))


def search(cfg: BudgetConfig, slow: BudgetPolicy, fast: BudgetPolicy, cost: CostModel,
           acceptance: tuple[float, ...], examples: int, seed: int) -> tuple[Found, Trace]:
    """Maximise mean TTFT under ``slow`` minus under ``fast`` over ``examples`` workloads
    (drawn from ``seed``); the best as a trace of ``slow``'s run, which replays."""
    found = Found()

    @hypothesis_seed(seed)
    @settings(max_examples=examples, database=None, deadline=None, phases=[Phase.generate, Phase.target],
              suppress_health_check=list(HealthCheck))
    @given(load=workloads(cfg, acceptance))
    def probe(load: Workload) -> None:
        ops: list[Op] = []
        gap = float(metrics.ttfts(simulate(cfg, slow, load, cost, ops=ops)).mean()
                    - metrics.ttfts(simulate(cfg, fast, load, cost)).mean())
        target(gap, label="mean TTFT gap (s)")
        if gap > found.gap_s:
            found.gap_s, found.workload, found.ops = gap, load, ops

    probe()
    config: dict[str, Any] = cfg.to_dict()
    trace = Trace(slow.name, config, tuple(found.ops),
                  description=f"whatif search: mean TTFT {found.gap_s * 1000:.1f} ms longer under {slow.name} than "
                              f"{fast.name}", found_by="tokenbudget whatif --search")
    return found, trace
