"""Shrink a trace while a predicate still holds: drop requests, steps, aborts and accepted drafts.

Delta debugging over three kinds of unit: requests (a request's add, its aborts and its
accepted entries), step and abort ops, and single accepted entries. For each kind in turn,
chunks of half the units, then a quarter, down to one unit each, are left out; a
candidate that keeps the predicate true replaces the trace and the search goes on at the
same place. Then single units are tried again until a round removes nothing or the attempt
budget is spent: the result is 1-minimal (no single unit can be left out) unless the budget
ran out. A long trace whose failure needs a few ops loses most of them in a few large
chunks, so later attempts replay short traces.
"""
from __future__ import annotations

import time
from dataclasses import replace
from typing import Any, Callable, Sequence

from .trace import AbortOp, AddOp, Op, StepOp, Trace

MAX_ATTEMPTS = 200


class _Attempts:
    """The predicate, called at most ``limit`` times and never past ``deadline`` (perf_counter)."""

    def __init__(self, holds: Callable[[Trace], bool], limit: int, deadline: float | None) -> None:
        self.holds, self.limit, self.deadline = holds, limit, deadline

    @property
    def left(self) -> int:
        return 0 if self.deadline is not None and time.perf_counter() >= self.deadline else self.limit

    def __call__(self, candidate: Trace) -> bool:
        assert self.limit > 0
        self.limit -= 1
        return self.holds(candidate)


def shrink(trace: Trace, holds: Callable[[Trace], bool], max_attempts: int = MAX_ATTEMPTS,
           deadline: float | None = None) -> Trace:
    """A trace no larger than ``trace`` for which ``holds`` is true (``holds(trace)`` must be).

    ``holds`` is called at most ``max_attempts`` times, and not once ``deadline``
    (``time.perf_counter``) has passed: no candidate is built after it either.
    """
    attempt = _Attempts(holds, max_attempts, deadline)
    chunked = True
    while attempt.left:
        before = trace
        for units, without in _UNIT_KINDS:
            trace = _leave_out(trace, units, without, attempt, chunked)
        if trace is before:
            break
        chunked = False
    return trace


def _leave_out(trace: Trace, units: Callable[[Trace], list[Any]],
               without: Callable[[Trace, Sequence[Any]], Trace], attempt: _Attempts, chunked: bool) -> Trace:
    """``trace`` with the chunks of ``units`` left out that ``attempt`` accepts: halves first
    when ``chunked``, down to single units."""
    current = units(trace)
    size = max(1, len(current) // 2) if chunked else 1
    while True:
        at = 0
        while at < len(current):
            if not attempt.left:
                return trace
            candidate = without(trace, current[at:at + size])
            if attempt(candidate):
                trace, current = candidate, units(candidate)  # the next chunk now starts at ``at``
            else:
                at += size
        if size == 1:
            return trace
        size //= 2


def _request_ids(trace: Trace) -> list[Any]:
    return [op.id for op in trace.ops if isinstance(op, AddOp)]


def _without_requests(trace: Trace, ids: Sequence[Any]) -> Trace:
    gone = set(ids)
    out: list[Op] = []
    for op in trace.ops:
        if isinstance(op, (AddOp, AbortOp)) and op.id in gone:
            continue
        if isinstance(op, StepOp) and not gone.isdisjoint(op.accepted):
            op = StepOp({r: n for r, n in op.accepted.items() if r not in gone})
        out.append(op)
    return replace(trace, ops=tuple(out))


def _step_and_abort_places(trace: Trace) -> list[Any]:
    return [i for i, op in enumerate(trace.ops) if isinstance(op, (StepOp, AbortOp))]


def _without_places(trace: Trace, places: Sequence[Any]) -> Trace:
    gone = set(places)
    return replace(trace, ops=tuple(op for i, op in enumerate(trace.ops) if i not in gone))


def _accepted_entries(trace: Trace) -> list[Any]:
    return [(i, rid) for i, op in enumerate(trace.ops) if isinstance(op, StepOp) for rid in op.accepted]


def _without_accepted(trace: Trace, entries: Sequence[Any]) -> Trace:
    gone = set(entries)
    return replace(trace, ops=tuple(
        StepOp({r: n for r, n in op.accepted.items() if (i, r) not in gone})
        if isinstance(op, StepOp) and any((i, r) in gone for r in op.accepted) else op
        for i, op in enumerate(trace.ops)))


_UNIT_KINDS = ((_request_ids, _without_requests), (_step_and_abort_places, _without_places),
               (_accepted_entries, _without_accepted))


def cut_after_step(trace: Trace, step: int) -> Trace:
    """The trace up to and including its step op number ``step`` (0-based)."""
    seen = -1
    for i, op in enumerate(trace.ops):
        if isinstance(op, StepOp):
            seen += 1
            if seen == step:
                return replace(trace, ops=trace.ops[: i + 1])
    return trace
