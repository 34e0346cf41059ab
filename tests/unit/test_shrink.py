"""The trace shrinker used for conformance divergences (no engine needed)."""
from __future__ import annotations

import time
from unittest import mock

from tokenbudget.spec.shrink import cut_after_step, shrink
from tokenbudget.spec.trace import AbortOp, AddOp, StepOp, Trace

TRACE = Trace(
    policy="vllm-adaptive",
    config={"max_num_batched_tokens": 64},
    ops=(AddOp("a", 5, 2), AddOp("b", 7, 2), StepOp({"a": 1, "b": 2}), AddOp("c", 3, 1), StepOp({"b": 1}),
         AbortOp("a"), StepOp(), StepOp({"c": 1})),
)


def test_shrink_keeps_only_what_the_predicate_needs() -> None:
    def holds(t: Trace) -> bool:  # "b is added and at least two steps run"
        return any(isinstance(op, AddOp) and op.id == "b" for op in t.ops) and t.num_steps >= 2

    small = shrink(TRACE, holds)
    assert small.ops == (AddOp("b", 7, 2), StepOp(), StepOp())


def test_a_long_trace_loses_what_it_does_not_need_in_large_chunks() -> None:
    ops = (AddOp("a", 5, 2), *(StepOp() for _ in range(500)), StepOp({"a": 1}), *(StepOp() for _ in range(500)))
    calls = []

    def holds(t: Trace) -> bool:  # "a is added and a step accepts one of its drafts"
        calls.append(t)
        return any(isinstance(op, StepOp) and op.accepted for op in t.ops) and isinstance(t.ops[0], AddOp)

    small = shrink(Trace(policy="vllm-adaptive", config={}, ops=ops), holds)
    assert small.ops == (AddOp("a", 5, 2), StepOp({"a": 1}))
    assert len(calls) <= 40  # 29; one at a time, 200 attempts left 902 ops


def test_shrink_respects_its_attempt_budget() -> None:
    calls = []
    shrink(TRACE, lambda t: calls.append(t) is None and False, max_attempts=5)
    assert len(calls) == 5


def test_shrink_stops_at_its_deadline() -> None:
    calls: list[Trace] = []
    assert shrink(TRACE, lambda t: calls.append(t) is None, deadline=time.perf_counter() - 1) is TRACE
    assert calls == [], "past the deadline no candidate is tried"

    def holds(t: Trace) -> bool:
        calls.append(t)
        return True

    with mock.patch("time.perf_counter", lambda: 0 if len(calls) < 2 else 99):  # the deadline passes in attempt 2
        shrink(TRACE, holds, deadline=1)
    assert len(calls) == 2


def test_cut_after_step_keeps_the_ops_up_to_that_step() -> None:
    assert cut_after_step(TRACE, 1).ops == TRACE.ops[:5]
    assert cut_after_step(TRACE, 9) == TRACE
