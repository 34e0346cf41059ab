"""The Target interface: what executes trace operations and reports observations.

A target is one deployment (a config under a budget policy) of some scheduler: the
reference model, a real engine behind a harness, or the torch runner. Replay and the
fuzzer drive every target through this interface only, and through one op-application
path (``spec.execution.Execution``), so every target is judged by the same predicates.
"""
from __future__ import annotations

from pathlib import Path
from typing import Mapping, Protocol

from .records import StepLimits, StepOutcome, StepRecord
from .trace import AddOp


class TargetUnavailable(RuntimeError):
    """The target cannot run on this machine (its engine is not installed, or not the one
    asked for): one line naming what is missing and how to get it. Bad input, never a
    verdict on the scheduler."""


CONFORMANCE = "conformance"  # a real engine parted from the reference model run beside it on the same ops


class Target(Protocol):
    """A scheduler that executes operations and reports what it did.

    ``step`` never raises for a failure inside the scheduler: its record's ``error`` names
    it (``"Type: message (file:line)"``), and the dead target receives no further calls. A target that cannot expose the
    ledger, ``progress_possible``, ``unserved_demand`` or its state's ``fingerprint`` leaves
    them None; the spec then does not judge what needs them. An abort the target itself
    decides in a step is in that step's outcome, status "aborted". Construction raises
    TargetUnavailable when the target cannot run here.

    A real engine's target running the model beside it (``harness/differential.py``) also has
    ``cfg`` (its engine's version named), ``reference_run`` (the model's RunRecord),
    ``explained_errors`` (steps whose ``error`` a finding explains) and ``judged`` (the
    violations only the comparison shows: ``conformance``, or a finding's invariant).
    """

    limits: StepLimits

    def add(self, op: AddOp) -> None:
        """Queue a request; ValueError (one line) when the target refuses it."""

    def step(self, accepted: Mapping[str, int]) -> tuple[StepRecord, StepOutcome]:
        """Schedule once, then apply the output with ``accepted[id]`` drafts accepted."""

    def abort(self, request_id: str) -> None:
        """Abort a request; a finished one is left alone."""


def release(target: object) -> None:
    """Free the target's objects now through its ``close``, where it has one; it takes no more calls."""
    close = getattr(target, "close", None)
    if close is not None:
        close()


def describe(exc: BaseException) -> str:
    """``Type: message (file:line)`` of the innermost frame, for a record's ``error``."""
    tb = exc.__traceback__
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    where = f" ({Path(tb.tb_frame.f_code.co_filename).name}:{tb.tb_lineno})" if tb is not None else ""
    return f"{type(exc).__name__}: {exc}{where}"
