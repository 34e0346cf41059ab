"""EngineTarget: the contract of a real engine's target, one engine step a spec record.

A subclass builds ``engine`` (its driver over the engine's own scheduler: ``abort`` and
``step(accepted)`` returning the step it observed) and ``limits`` (the step limits the spec
judges against), queues a request with ``add`` and reads an observed step as the spec's
StepRecord with ``record``. Queues, blocks in use, block tables, ``progress_possible`` and
the fingerprint travel in that record; what an engine cannot expose it leaves None there.
Construction raises ``EngineUnavailable`` without the engine.
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Generic, Iterable, Mapping, Protocol, TypeVar

from ..spec.records import RequestState, StepLimits, StepOutcome, StepRecord
from ..spec.trace import AddOp


class ObservedStep(Protocol):
    """What a driver's step saw: the requests it touched, after the output, and the preempted in order."""

    @property
    def requests(self) -> dict[str, RequestState]: ...

    @property
    def preempted(self) -> Iterable[str]: ...


Observed = TypeVar("Observed", bound=ObservedStep)
Observed_co = TypeVar("Observed_co", bound=ObservedStep, covariant=True)


class EngineDriver(Protocol[Observed_co]):
    """An engine's own scheduler behind the trace's operations."""

    def abort(self, rid: str) -> None: ...

    def step(self, accepted: Mapping[str, int]) -> Observed_co: ...


class EngineTarget(ABC, Generic[Observed]):
    """A real engine as a ``spec.target.Target``."""

    engine: EngineDriver[Observed]
    limits: StepLimits
    num_steps: int = 0

    @abstractmethod
    def add(self, op: AddOp) -> None:
        """Queue the request; ValueError (one line) when the engine refuses it."""

    def abort(self, request_id: str) -> None:
        self.engine.abort(request_id)

    def step(self, accepted: Mapping[str, int]) -> tuple[StepRecord, StepOutcome]:
        observed = self.engine.step(accepted)
        record = self.record(self.num_steps, observed)
        self.num_steps += 1
        return record, StepOutcome(step=record.step, requests=observed.requests,
                                   preempted=frozenset(observed.preempted))

    def close(self) -> None:
        """Free the engine's objects now, where its driver can (``close``); no more calls after."""
        close = getattr(self.engine, "close", None)
        if close is not None:
            close()

    @abstractmethod
    def record(self, step: int, observed: Observed) -> StepRecord:
        """The observed engine step as the spec's record of step ``step``."""
