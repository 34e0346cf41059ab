"""A divergence that cutting or shrinking loses is still reported, with the workload's trace.

The engine here diverges at step 6 only when an add that comes after step 7 is in the trace
(as a FastDeploy copy with its seat check off by one did): cut after step 6, the workload
agrees, so the conformance run keeps the uncut trace instead of failing on an agreeing one.
"""
from __future__ import annotations

from pathlib import Path

from tokenbudget.harness.conform import ConformEngine, run_conformance
from tokenbudget.harness.lockstep import Lockstep, StepView
from tokenbudget.spec.trace import AddOp, StepExpectation, StepOp, Trace, load_trace

FIRST, LATE = AddOp("a", 4, 16), AddOp("late", 4, 2)
WORKLOAD = Trace(policy="vllm-adaptive", config={}, ops=(FIRST, *[StepOp({})] * 8, LATE, StepOp({})))


def _lockstep(trace: Trace) -> Lockstep:
    """Diverges at step 6 when the trace has 7 steps and both adds; agrees otherwise."""
    steps = sum(isinstance(op, StepOp) for op in trace.ops)
    if steps < 7 or FIRST not in trace.ops or LATE not in trace.ops:
        return Lockstep(steps, frozenset(), trace=trace)
    model = StepView({"a": 1}, {}, (), frozenset())
    engine = StepView({"a": 2}, {}, (), frozenset())
    return Lockstep(6, frozenset(), 6, ("num_scheduled_tokens",), model, engine, trace=trace)


ENGINE = ConformEngine("fake", "Fake", "1", "1", None, "vllm-adaptive", lambda seed, index: WORKLOAD, _lockstep,
                       lambda result: None)


def test_a_divergence_the_cut_loses_is_reported_with_the_uncut_trace(tmp_path: Path) -> None:
    report = run_conformance(0, 1, tmp_path, engine=ENGINE)
    (found,) = report.divergences
    assert not report.ok and found.explanation is None and found.result.step == 6
    written = load_trace(found.trace)
    assert LATE in written.ops and not _lockstep(written).agrees
    assert written.expect == (StepExpectation(6, {"a": 2}, {}, (), 0),)
    assert "at step 6" in (written.description or "")
