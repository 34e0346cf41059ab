"""The documented ways in which the model (``sglang-0.5.23``) and SGLang 0.5.23's code
disagree, each with its SPEC.md §10 entry. Conformance attaches the first matching entry
to a divergence; one that matches none is unexplained and fails the run. Each entry checks
its mechanism on the model's state at the divergent step, never on a message. A divergence
is a finding about SGLang or a bug of the model; the one entry left is a simplification.

* ``sglang-grant-clip`` (a simplification, SPEC.md §10 simplification 3): near
  ``max_model_len`` the model clips a decode's grant to ``max_model_len - computed - 1``;
  SGLang's verify always runs ``num_draft_tokens = 1 + k`` rows.
"""
from __future__ import annotations

from ..known_divergences import KnownDivergence
from ..lockstep import Lockstep


def _grant_clip(r: Lockstep) -> bool:
    """Every differing grant is a decode the model clipped at max_model_len, SGLang's 1 + k."""
    if r.model is None or r.vllm is None or r.vllm.error or r.config is None or r.model_run is None:
        return False
    if not set(r.fields) <= {"num_scheduled_tokens", "scheduled_draft_tokens", "finished"}:
        return False
    m, v, cfg = r.model.num_scheduled_tokens, r.vllm.num_scheduled_tokens, r.config
    rows, step = 1 + cfg.num_speculative_tokens, r.model_run.steps[-1]
    if set(m) != set(v):
        return False
    differing = [rid for rid in m if m[rid] != v[rid]]
    return bool(differing) and all(
        v[rid] == rows and m[rid] == cfg.max_model_len - step.computed_before[rid] - 1 < rows
        and r.model.scheduled_draft_tokens.get(rid, 0) == m[rid] - 1 for rid in differing)


KNOWN: tuple[KnownDivergence, ...] = (
    KnownDivergence("sglang-grant-clip", "simplification", "SPEC.md §10 simplification 3",
                    "the model clips a decode's grant at max_model_len; SGLang verifies 1 + k rows", _grant_clip),
)


def explain(result: Lockstep) -> KnownDivergence | None:
    """The documented divergence this lockstep result shows, or None."""
    return next((k for k in KNOWN if k.matches(result)), None)
