"""Failures: a fuzzed run that broke the spec, raised as an exception carrying its trace.

Each invariant has its own exception class (and a target's own exception has one more,
``target-error``), so Hypothesis treats violations of different invariants as distinct
bugs: it shrinks each one separately and reports all of them.
"""
from __future__ import annotations

from typing import ClassVar

from ..spec.invariants import INVARIANTS, Violation
from ..spec.trace import Trace

from ..model import POLICY_ERROR

TARGET_ERROR = "target-error"  # the target raised inside a step (its record's ``error``)


def error_kind(error: str) -> str:
    """The failure kind of a step's ``error``: ``policy-error`` when the user policy failed."""
    return POLICY_ERROR if POLICY_ERROR + ":" in error else TARGET_ERROR


class FuzzFailure(AssertionError):
    """A run broke the spec. ``kind`` is the violated invariant's id that the failure
    reports, or ``target-error`` when the target raised and no invariant was violated.

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
    for kind in (*INVARIANTS, TARGET_ERROR, POLICY_ERROR)
}


def failure(kind: str, violations: tuple[Violation, ...], error: str | None, trace: Trace) -> FuzzFailure:
    """The failure of ``kind``: an invariant some violation names, ``target-error`` or ``policy-error``."""
    return FAILURE_CLASSES[kind](violations, error, trace)
