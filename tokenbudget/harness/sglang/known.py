"""The documented ways in which the model (``sglang-0.5.23``) and SGLang 0.5.23's code
disagree: none. Conformance attaches the first matching entry to a divergence; one that
matches none is unexplained and fails the run. A divergence is a finding about SGLang (an
entry of kind ``finding``, with its trace and SGLang's cited lines) or a bug of the model to
fix; the model's simplifications (SPEC.md §10) are ones that do not diverge on the workloads.
"""
from __future__ import annotations

from ..known_divergences import KnownDivergence, first_match
from ..lockstep import Lockstep

KNOWN: tuple[KnownDivergence, ...] = ()


def explain(result: Lockstep) -> KnownDivergence | None:
    """The documented divergence this lockstep result shows, or None."""
    return first_match(KNOWN, result)
