"""ModelTarget: the reference scheduler as a ``spec.target.Target``, and the factory type.

A ``TargetFactory`` builds a target from a config and a policy; replay, the fuzzer and
the commands take one, so the model, a real engine's harness and the torch runner plug
in the same way.
"""
from __future__ import annotations

from dataclasses import replace
from typing import Callable, Mapping

from . import BudgetConfig, BudgetPolicy, scheduler_for
from ..spec.records import StepOutcome, StepRecord
from ..spec.target import Target, describe
from ..spec.trace import AddOp

TargetFactory = Callable[[BudgetConfig, BudgetPolicy], Target]


class ModelTarget:
    """The reference scheduler (the policy's loop, ``model.scheduler_for``) as a target; it fills
    every record field.

    Raises ConfigError on construction when ``validate`` and the policy refuses cfg.
    """

    # Steps without ops after a fixpoint would each give its record again (but its number) and
    # do nothing else: replay may write them without running them. Targets that execute
    # steps for real (the torch runner, a real engine) run every step; so does a subclass
    # whose step does more than the model's (it sets this False).
    repeats_fixpoints = True

    def __init__(self, cfg: BudgetConfig, policy: BudgetPolicy, validate: bool = True) -> None:
        self.scheduler = scheduler_for(cfg, policy, validate=validate)
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
        running_before, waiting = list(sched.running), sched.waiting_ids()  # running ids read only on an error
        in_use = sched.pool.num_in_use
        try:
            return sched.schedule()
        except Exception as exc:
            running = tuple(r.request_id for r in running_before)
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
