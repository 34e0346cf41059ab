"""The documented ways in which the model (``trtllm``) and TensorRT-LLM's scheduler.py at 002f3cc3
disagree. Conformance attaches the first matching entry to a divergence; one that matches none is
unexplained and fails the run. Each is a finding about TensorRT-LLM (with its trace) or a bug of
the model to fix: none is a simplification explained away.
"""
from __future__ import annotations

from ..known_divergences import KnownDivergence
from ..lockstep import Lockstep

KNOWN: tuple[KnownDivergence, ...] = ()


def explain(result: Lockstep) -> KnownDivergence | None:
    """The documented divergence this lockstep result shows, or None."""
    return next((k for k in KNOWN if k.matches(result)), None)
