"""Execution: apply trace operations to a target, in order, and record what it observed.

The one op-application path: replay runs a trace's ops through it, the fuzzer the ops it
generates, so a fuzzer's run and the replay of its trace observe the same thing.
"""
from __future__ import annotations

from .records import RequestState, RunRecord, StepRecord
from .trace import AbortOp, AddOp, Op
from .target import Target


class TargetDead(RuntimeError):
    """An op was applied after a step in which the target raised."""


class Execution:
    """One run of operations on a target and its RunRecord.

    After a step whose record carries an ``error`` the target is dead: ``crashed`` holds
    that record and ``apply`` raises TargetDead.
    """

    def __init__(self, target: Target) -> None:
        self.target = target
        self.run = RunRecord(limits=target.limits)
        self.crashed: StepRecord | None = None

    def apply(self, op: Op) -> StepRecord | None:
        """Apply one op; a step returns its record. ValueError when the target refuses an add."""
        if self.crashed is not None:
            raise TargetDead(f"the target raised in step {self.crashed.step}: {self.crashed.error}")
        run = self.run
        if isinstance(op, AddOp):
            self.target.add(op)
            run.events.append(("add", op.id))
            run.added[op.id] = RequestState("waiting", 0, 0, op.max_tokens, op.prompt_len)
            return None
        if isinstance(op, AbortOp):
            self.target.abort(op.id)
            run.events.append(("abort", op.id))
            return None
        record, outcome = self.target.step(op.accepted)
        run.events.append(("step", len(run.steps)))
        run.steps.append(record)
        run.outcomes.append(outcome)
        if record.error is not None:
            self.crashed = record
        return record
