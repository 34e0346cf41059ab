"""Shrink a trace while a predicate still holds: drop requests, steps, aborts and accepted drafts.

A greedy pass (delta debugging at the granularity of one op): each candidate leaves out
one request (its add, its aborts and its accepted entries), one step or abort op, or one
accepted entry; a candidate that keeps the predicate true replaces the trace, and the
passes repeat until none does or the attempt budget is spent.
"""
from __future__ import annotations

from dataclasses import replace
from typing import Callable, Iterator

from .trace import AbortOp, AddOp, Op, StepOp, Trace

MAX_ATTEMPTS = 200


def shrink(trace: Trace, holds: Callable[[Trace], bool], max_attempts: int = MAX_ATTEMPTS) -> Trace:
    """A trace no larger than ``trace`` for which ``holds`` is true (``holds(trace)`` must be).

    ``holds`` is called at most ``max_attempts`` times.
    """
    attempts = 0
    progress = True
    while progress and attempts < max_attempts:
        progress = False
        for candidate in _candidates(trace):
            attempts += 1
            if holds(candidate):
                trace, progress = candidate, True
                break
            if attempts >= max_attempts:
                break
    return trace


def _candidates(trace: Trace) -> Iterator[Trace]:
    ops = trace.ops
    for op in ops:
        if isinstance(op, AddOp):
            yield replace(trace, ops=_without_request(ops, op.id))
    for i, op in enumerate(ops):
        if isinstance(op, (StepOp, AbortOp)):
            yield replace(trace, ops=ops[:i] + ops[i + 1:])
    for i, op in enumerate(ops):
        if isinstance(op, StepOp):
            for rid in op.accepted:
                kept = {r: n for r, n in op.accepted.items() if r != rid}
                yield replace(trace, ops=ops[:i] + (StepOp(kept),) + ops[i + 1:])


def _without_request(ops: tuple[Op, ...], rid: str) -> tuple[Op, ...]:
    out: list[Op] = []
    for op in ops:
        if isinstance(op, (AddOp, AbortOp)) and op.id == rid:
            continue
        if isinstance(op, StepOp) and rid in op.accepted:
            op = StepOp({r: n for r, n in op.accepted.items() if r != rid})
        out.append(op)
    return tuple(out)


def cut_after_step(trace: Trace, step: int) -> Trace:
    """The trace up to and including its step op number ``step`` (0-based)."""
    seen = -1
    for i, op in enumerate(trace.ops):
        if isinstance(op, StepOp):
            seen += 1
            if seen == step:
                return replace(trace, ops=trace.ops[: i + 1])
    return trace
