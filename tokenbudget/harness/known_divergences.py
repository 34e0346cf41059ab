"""A documented way in which the model and a real engine disagree, with its SPEC.md entry.

Conformance attaches the first matching entry of the engine's (``harness/<engine>/known.py``)
to a divergence; a divergence that matches none is unexplained and fails the run. An entry
is either a ``finding`` about the engine (the findings table, ``model.findings``) or a
deliberate ``simplification`` of the model.

A finding explains a divergence when it affects the version compared, the engine raised in
the step where the finding says it raises, the model reports the finding's invariant there,
and the model's run shows the finding's mechanism.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

from ..model.findings import Finding, findings_of
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


def _finding(f: Finding) -> KnownDivergence:
    def matches(r: Lockstep) -> bool:
        assert r.model is not None and r.config is not None and r.model_run is not None
        return (r.config.engine_version in f.affects_versions and f.engine_raises and r.predicted_failure and f.invariant in r.model.violations
                and f.shows(r.config, r.model_run))
    return KnownDivergence(f.id, "finding", f.spec, f.summary, matches)


def finding_divergences(engine: str) -> tuple[KnownDivergence, ...]:
    """The engine's findings (``model.findings``) that a crash in lockstep can show."""
    return tuple(_finding(f) for f in findings_of(engine))


def first_match(known: Sequence[KnownDivergence], result: Lockstep) -> KnownDivergence | None:
    """The first entry of ``known`` this lockstep result shows, or None."""
    return next((k for k in known if k.matches(result)), None)
