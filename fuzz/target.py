"""Targets: what executes trace operations and reports observations.

A target is one deployment (a config under a budget policy) of some scheduler: the
reference model here, a real engine behind a harness later. Replay and the fuzzer
drive every target through this interface only, so they share one op-application path
(``fuzz.execution.Execution``) and judge every target with the same spec predicates.
"""
from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Callable, Mapping, Protocol

from ..model import BudgetConfig, BudgetPolicy, Scheduler
from ..spec.records import StepLimits, StepOutcome, StepRecord
from ..spec.trace import AddOp


class Target(Protocol):
    """A scheduler that executes operations and reports what it did.

    ``step`` never raises for a failure inside the scheduler: it returns a record whose
    ``error`` names the exception (``"Type: message (file:line)"``). After such a step
    the target is dead and receives no further calls. A target that cannot expose the
    ledger, ``progress_possible`` or ``unserved_demand`` leaves them None; the spec then
    does not judge what needs them.
    """

    limits: StepLimits

    def add(self, op: AddOp) -> None:
        """Queue a request; ValueError (one line) when the target refuses it."""

    def step(self, accepted: Mapping[str, int]) -> tuple[StepRecord, StepOutcome]:
        """Schedule once, then apply the output with ``accepted[id]`` drafts accepted."""

    def abort(self, request_id: str) -> None:
        """Abort a request; a finished one is left alone."""


TargetFactory = Callable[[BudgetConfig, BudgetPolicy], Target]


def describe(exc: BaseException) -> str:
    """``Type: message (file:line)`` of the innermost frame, for a record's ``error``."""
    tb = exc.__traceback__
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    where = f" ({Path(tb.tb_frame.f_code.co_filename).name}:{tb.tb_lineno})" if tb is not None else ""
    return f"{type(exc).__name__}: {exc}{where}"


class ModelTarget:
    """The reference scheduler (``model.Scheduler``) as a target; it fills every record field.

    Raises ConfigError on construction when ``validate`` and the policy refuses cfg.
    """

    def __init__(self, cfg: BudgetConfig, policy: BudgetPolicy, validate: bool = True) -> None:
        self.scheduler = Scheduler(cfg, policy, validate=validate)
        self.limits = self.scheduler.limits

    def add(self, op: AddOp) -> None:
        self.scheduler.add_request(op.id, op.prompt_len, op.max_tokens, op.priority, op.prefix_group, op.prefix_len)

    def abort(self, request_id: str) -> None:
        self.scheduler.abort_request(request_id)

    def step(self, accepted: Mapping[str, int]) -> tuple[StepRecord, StepOutcome]:
        record = self.schedule()
        if record.error is not None:
            return record, StepOutcome(step=record.step, requests={})
        return self.apply_output(record, accepted)

    def schedule(self) -> StepRecord:
        """One pass; a pass that raises gives an empty record with ``error`` set and the
        queues as they were before it (nothing observable happened)."""
        sched = self.scheduler
        running, waiting = tuple(r.request_id for r in sched.running), tuple(r.request_id for r in sched.waiting)
        in_use = sched.pool.num_in_use
        try:
            return sched.schedule()
        except Exception as exc:
            return StepRecord(
                step=sched.num_steps, limits=self.limits, num_scheduled_tokens={}, scheduled_draft_tokens={},
                runner_rows={}, computed_before={}, num_tokens={}, padded=frozenset(), prefill=frozenset(),
                preempted=(), running=running, waiting=waiting, kv_blocks_in_use=in_use, block_tables={},
                block_keys={}, error=describe(exc),
            )

    def apply_output(self, record: StepRecord, accepted: Mapping[str, int]) -> tuple[StepRecord, StepOutcome]:
        """Feed a pass's output back; if that raises, the pass stands with ``error`` set."""
        try:
            return record, self.scheduler.update_from_output(record, dict(accepted))
        except Exception as exc:
            return replace(record, error=describe(exc)), StepOutcome(step=record.step, requests={})
