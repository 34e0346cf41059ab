"""Failures: a fuzzed run that broke the spec, raised as an exception carrying its trace.

Each invariant has its own exception class (an exception inside the scheduler is the
invariant ``model-error``; a user policy's own failure has one more, ``policy-error``), so
Hypothesis treats violations of different invariants as distinct bugs: it shrinks each one
separately and reports all of them.
"""
from __future__ import annotations

from typing import ClassVar

from ..spec.invariants import INVARIANTS, POLICY_ERROR, Violation, model_error
from ..spec.trace import Trace

MODEL_ERROR = model_error.id  # an exception inside the scheduler, on a step or outside one


def error_kind(error: str) -> str | None:
    """The failure kind a step's ``error`` adds to its violations: ``policy-error`` when the
    user policy failed, else None (the step's ``model-error`` violation names it)."""
    return POLICY_ERROR if POLICY_ERROR + ":" in error else None


class FuzzFailure(AssertionError):
    """A run broke the spec. ``kind`` is the violated invariant's id that the failure
    reports (``model-error`` when the scheduler raised), or ``policy-error``.

    ``trace`` holds exactly the ops applied, with a ``violation`` expectation per
    violated invariant, so it replays the failure on the model. ``program`` is the
    Hypothesis program that produced it, filled in when Hypothesis prints it.
    """

    kind: ClassVar[str]

    def __init__(self, violations: tuple[Violation, ...], error: str | None, trace: Trace) -> None:
        self.violations = violations
        self.error = error
        self.trace = trace
        self.program: list[str] = []
        lines = [str(v) for v in violations] + ([f"the target raised: {error}"] if error else [])
        super().__init__("\n".join(lines))


def _class_name(kind: str) -> str:
    return "".join(part.capitalize() for part in kind.replace("+", "-").split("-")) + "Failure"


FAILURE_CLASSES: dict[str, type[FuzzFailure]] = {
    kind: type(_class_name(kind), (FuzzFailure,), {"kind": kind, "__module__": __name__})
    for kind in (*INVARIANTS, POLICY_ERROR)
}


def failure(kind: str, violations: tuple[Violation, ...], error: str | None, trace: Trace) -> FuzzFailure:
    """The failure of ``kind``: an invariant some violation names, or ``policy-error``."""
    return FAILURE_CLASSES[kind](violations, error, trace)
