"""The documented ways in which the model and vLLM disagree: vLLM's findings a crash shows
(``model.findings``, SPEC.md §6) and the model's deliberate simplifications (SPEC.md §5;
none of them diverges today)."""
from __future__ import annotations

from ..known_divergences import KnownDivergence, finding_divergences, first_match
from ..lockstep import Lockstep

SIMPLIFICATIONS: tuple[KnownDivergence, ...] = ()

KNOWN: tuple[KnownDivergence, ...] = finding_divergences("vllm") + SIMPLIFICATIONS


def explain(result: Lockstep) -> KnownDivergence | None:
    """The documented divergence this lockstep result shows, or None."""
    return first_match(KNOWN, result)
