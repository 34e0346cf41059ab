"""The documented ways in which the model and vLLM 0.32 disagree, each with its SPEC.md entry.

Conformance attaches the first matching entry to a divergence; a divergence that
matches none is unexplained and fails the run. An entry is either a ``finding`` about
vLLM (SPEC.md §6) or a deliberate ``simplification`` of the model (SPEC.md §5).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from .lockstep import Lockstep


@dataclass(frozen=True)
class KnownDivergence:
    id: str
    kind: str  # "finding" | "simplification"
    spec: str  # where SPEC.md explains it
    summary: str
    matches: Callable[[Lockstep], bool]

    def to_json(self) -> dict[str, str]:
        return {"id": self.id, "kind": self.kind, "spec": self.spec, "summary": self.summary}


def _padded_admission_cut(r: Lockstep) -> bool:
    assert r.model is not None and r.vllm is not None
    error = r.vllm.error or ""
    return (r.predicted_failure and error.startswith("AssertionError") and "scheduler.py:1372" in error
            and "spec-shape" in r.model.violations)


KNOWN: tuple[KnownDivergence, ...] = (
    KnownDivergence(
        "F1", "finding", "spec/SPEC.md §6 F1",
        "a padded admission cut by long_prefill_token_threshold: vLLM's schedule() raises AssertionError "
        "(scheduler.py:1372); the model reports spec-shape for the same step",
        _padded_admission_cut,
    ),
)


def explain(result: Lockstep) -> KnownDivergence | None:
    """The documented divergence this lockstep result shows, or None."""
    return next((k for k in KNOWN if k.matches(result)), None)
