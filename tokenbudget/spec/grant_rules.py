"""What one grant of a step must satisfy, written over IntLike.

The step invariants ``model-len`` and ``spec-shape`` judge each grant with these
predicates; the prover's violation search and its induction call the very same ones on
z3 terms. ``kv_slots_needed`` is the KV a grant needs: the loops allocate it, the
prover's pass skeleton asks for it, and ``kv-capacity`` checks that it is held.
"""
from __future__ import annotations

from .intlike import BoolLike, IntLike, and_, min_, not_, or_


def kv_slots_needed(computed: IntLike, tokens: IntLike, lookahead: IntLike, max_model_len: IntLike) -> IntLike:
    """KV slots a request needs to run ``tokens`` past ``computed``: those, plus the
    lookahead L reserved for the next step's drafts, never past max_model_len."""
    return min_(computed + tokens + lookahead, max_model_len)


def fits_model_len(computed: IntLike, grant: IntLike, max_model_len: IntLike, sampled: IntLike = 1) -> BoolLike:
    """``model-len``: computed + granted + the sampled token (none for pooling) <= max_model_len."""
    return computed + grant + sampled <= max_model_len


def drafts_within_k(drafts: IntLike, k: IntLike) -> BoolLike:
    return drafts <= k


def prefill_without_drafts(drafts: IntLike, prefill: BoolLike) -> BoolLike:
    """A prefill chunk carries no drafts (a negative count is drafts too: a bug)."""
    return not_(and_(drafts != 0, prefill))


def padded_shape(grant: IntLike, drafts: IntLike, k: IntLike) -> BoolLike:
    """A padded admission runs exactly 1 + k rows, k of them drafts."""
    return and_(grant == 1 + k, drafts == k)


def spec_shape(grant: IntLike, drafts: IntLike, padded: BoolLike, prefill: BoolLike, k: IntLike) -> BoolLike:
    """``spec-shape`` for one grant: the three rules above."""
    return and_(drafts_within_k(drafts, k), prefill_without_drafts(drafts, prefill),
                or_(not_(padded), padded_shape(grant, drafts, k)))
