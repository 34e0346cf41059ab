"""The documented ways in which the model (``trtllm``) and TensorRT-LLM's scheduler.py at 002f3cc3
disagree: the findings about TensorRT-LLM whose crash the model foretells (T1, T2: the KV manager
runs out, SPEC.md §9), none else. Conformance attaches the first matching entry to a divergence;
one that matches none is unexplained and fails the run.
"""
from __future__ import annotations

from ..known_divergences import KnownDivergence, finding_divergences, first_match
from ..lockstep import Lockstep

KNOWN: tuple[KnownDivergence, ...] = finding_divergences("tensorrt-llm")


def explain(result: Lockstep) -> KnownDivergence | None:
    """The documented divergence this lockstep result shows, or None."""
    return first_match(KNOWN, result)
