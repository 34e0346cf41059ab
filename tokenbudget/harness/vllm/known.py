"""The documented ways in which the model and vLLM disagree: vLLM's findings a crash shows
(``model.findings``, SPEC.md §6) and the model's deliberate simplifications (SPEC.md §5;
none of them diverges today). And the findings the monitor recognises on a live scheduler,
which has no config and keeps no run: those whose mechanism one step record shows."""
from __future__ import annotations

from typing import Any, Callable, Optional

from ...model.findings import FINDINGS, Finding, preempts_past_the_running, grants_nothing_beside_held_back_requests
from ...model.vllm.versions import nearest_version
from ...spec.invariants import Violation
from ...spec.records import StepRecord
from ..known_divergences import KnownDivergence, finding_divergences, first_match
from ..lockstep import Lockstep
from . import observe

SIMPLIFICATIONS: tuple[KnownDivergence, ...] = ()

KNOWN: tuple[KnownDivergence, ...] = finding_divergences("vllm") + SIMPLIFICATIONS


def explain(result: Lockstep) -> KnownDivergence | None:
    """The documented divergence this lockstep result shows, or None."""
    return first_match(KNOWN, result)


def _priority(sched: Any) -> bool:
    return getattr(sched.policy, "name", str(sched.policy)).upper().endswith("PRIORITY")


def _runs_async(sched: Any) -> bool:
    return observe.scheduler_kind(sched) == "AsyncScheduler"


# finding id -> (the live scheduler opens it, its mechanism in one step record)
LIVE: dict[str, tuple[Callable[[Any], bool], Callable[[StepRecord], bool]]] = {
    "F3": (_priority, preempts_past_the_running),
    "F9": (_runs_async, lambda rec: bool(rec.stale_drafts)),
    "F10": (_runs_async, grants_nothing_beside_held_back_requests),
}


def live_finding(sched: Any, release: str, violation: Violation, record: Optional[StepRecord]) -> Optional[Finding]:
    """The finding that explains ``violation`` of a step of ``sched`` (vLLM ``release``), or None."""
    if record is None:
        return None
    version = nearest_version(release)
    for fid, (opens, shows) in LIVE.items():
        finding = FINDINGS[fid]
        if finding.invariant == violation.invariant and version in finding.affects_versions \
                and opens(sched) and shows(record):
            return finding
    return None
