"""Failures: a fuzzed run that broke the spec, raised as an exception carrying its trace.

A failure's identity is its invariant and its mechanism (``identity``): the finding whose
matcher recognises it, for a crash (``model-error``) the raising site, for a real engine
that parts from the model beside it (``conformance``) the rule where they part; none
else. Each identity has its own exception class (made when first raised), so Hypothesis
treats failures of different identities as distinct bugs: it shrinks each one
separately, and a known crash never stands for a new one. A user policy's own failure is
one more kind, ``policy-error``.
"""
from __future__ import annotations

import re
from typing import ClassVar, Iterable, Optional

from ..spec.invariants import INVARIANTS, POLICY_ERROR, Violation, model_error
from ..spec.target import CONFORMANCE
from ..spec.trace import Trace

MODEL_ERROR = model_error.id  # an exception inside the scheduler, on a step or outside one
KINDS = (*INVARIANTS, POLICY_ERROR, CONFORMANCE)
_SITE = re.compile(r"\(([^()\s:]+):(\d+)(?: in (\w+))?\)")  # (file:line) or (file:line in function)


def raising_site(message: str) -> Optional[str]:
    """``file:function`` (``file:line`` when the function is not named) of the last
    ``(file:line[ in function])`` in a crash's message, or None."""
    found = _SITE.findall(message)
    if not found:
        return None
    file, line, function = found[-1]
    return f"{file}:{function or line}"


def identity(violation: Violation, finding: Optional[str] = None) -> str:
    """``invariant@mechanism``, or the invariant alone when no mechanism is known: the
    ``finding`` that explains it, a crash's raising site, or the rule a ``conformance``
    message names first (``rule: ...``)."""
    kind = violation.invariant
    mechanism = finding
    if mechanism is None and kind == MODEL_ERROR:
        mechanism = raising_site(violation.message)
    if mechanism is None and kind == CONFORMANCE:
        mechanism = violation.message.split(":", 1)[0]
    return kind if mechanism is None else f"{kind}@{mechanism}"


def kind_of(failure_identity: str) -> str:
    return failure_identity.split("@", 1)[0]


def is_known(failure_identity: str, known: Iterable[str]) -> bool:
    """Whether ``known`` (identities, or bare kinds standing for every mechanism) has it."""
    known = frozenset(known)
    return failure_identity in known or kind_of(failure_identity) in known


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
    identity: ClassVar[str]

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
    kind: type(_class_name(kind), (FuzzFailure,), {"kind": kind, "identity": kind, "__module__": __name__})
    for kind in KINDS
}


def failure_class(failure_identity: str) -> type[FuzzFailure]:
    """The class of an identity (``identity``), made the first time it is asked for."""
    if failure_identity not in FAILURE_CLASSES:
        kind = kind_of(failure_identity)
        assert kind in KINDS, failure_identity
        name = _class_name(kind)[:-len("Failure")] + "At" + "".join(c for c in failure_identity.split("@", 1)[1]
                                                                   if c.isalnum()) + "Failure"
        FAILURE_CLASSES[failure_identity] = type(name, (FuzzFailure,), {
            "kind": kind, "identity": failure_identity, "__module__": __name__})
    return FAILURE_CLASSES[failure_identity]


def failure(failure_identity: str, violations: tuple[Violation, ...], error: str | None, trace: Trace) -> FuzzFailure:
    """The failure of an identity (``identity``; a bare kind: an invariant some violation
    names, ``conformance`` or ``policy-error``)."""
    return failure_class(failure_identity)(violations, error, trace)
