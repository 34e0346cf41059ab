"""EngineTarget: the part every real engine's target shares, one engine step a spec record.

A subclass sets ``engine`` (its driver: ``add``, ``abort``, ``step(accepted)`` returning an
observed step with ``requests`` and ``preempted``) and ``limits``, and says how an observed
step reads as the spec's StepRecord (``record``).
"""
from __future__ import annotations

from typing import Any, Mapping

from ..spec.records import StepLimits, StepOutcome, StepRecord


class EngineTarget:
    engine: Any
    limits: StepLimits
    num_steps: int = 0

    def abort(self, request_id: str) -> None:
        self.engine.abort(request_id)

    def step(self, accepted: Mapping[str, int]) -> tuple[StepRecord, StepOutcome]:
        observed = self.engine.step(accepted)
        record = self.record(self.num_steps, observed)
        self.num_steps += 1
        return record, StepOutcome(step=record.step, requests=observed.requests,
                                   preempted=frozenset(observed.preempted))

    def record(self, step: int, observed: Any) -> StepRecord:
        """The observed engine step as the spec's record of step ``step``."""
        raise NotImplementedError
