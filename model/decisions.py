"""The per-request decisions of a scheduling pass, written over IntLike.

The Scheduler calls these for every request it visits; the prover calls the very same
functions on z3 terms when it unrolls a pass over symbolic requests. They fix the
order of vLLM 0.32's clipping: long-prefill threshold, then the policy's budgets, then
max_model_len for running requests; padding, then threshold, then budgets for
waiting ones.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..spec.intlike import BoolLike, IntLike, and_, ite, max_, min_, not_, or_
from .policy import BudgetParams, BudgetPolicy, Budgets


@dataclass(frozen=True)
class Admission:
    """The decision for the request at the head of the waiting queue.

    ``stop`` ends the waiting loop without scheduling it; otherwise it is granted
    ``grant`` tokens (if the KV pool has room), ``padded`` to 1 + k with placeholder drafts.
    """

    grant: IntLike
    padded: BoolLike
    stop: BoolLike


def capped_by_threshold(demand: IntLike, threshold: IntLike) -> IntLike:
    """``long_prefill_token_threshold`` (0 = off) caps what one request may take."""
    return ite(and_(0 < threshold, threshold < demand), threshold, demand)


def running_grant(policy: BudgetPolicy, p: BudgetParams, budgets: Budgets, demand: IntLike, computed: IntLike,
                  threshold: IntLike, max_model_len: IntLike, bypass: BoolLike) -> IntLike:
    """Tokens for a running request that wants ``demand``; <= 0 means skip it and go on.

    ``bypass``: the engine runs this decode whatever the budget (FastDeploy's worker).
    """
    wanted = capped_by_threshold(demand, threshold)
    grant = ite(bypass, wanted, policy.grant(p, wanted, budgets))
    return min_(grant, max_model_len - computed - 1)


def scheduled_drafts(drafts_in_grant: bool, drafts: IntLike, computed: IntLike, grant: IntLike,
                     num_tokens: IntLike, is_decode: BoolLike) -> IntLike:
    """Drafts that ride with a grant: those the grant covers past the known tokens when the
    grant counts drafts (vLLM), else every proposed draft of a decode (FastDeploy's worker)."""
    if drafts_in_grant:
        return max_(0, min_(drafts, computed + grant - num_tokens))
    return ite(is_decode, drafts, 0)


def admission(policy: BudgetPolicy, p: BudgetParams, budgets: Budgets, demand: IntLike, computed: IntLike,
              threshold: IntLike, max_model_len: IntLike, k: IntLike, prefill_scheduled: BoolLike,
              running_scheduled: BoolLike, chunked_prefill: BoolLike) -> Admission:
    """Decide for the head of the waiting queue, which wants ``demand`` past ``computed``.

    vLLM pads a 1-token admission to 1 + k when no prefill chunk ran this pass and either a
    running request was scheduled or the request has computed tokens (a prefix hit), and
    refuses to schedule it un-padded. Without chunked prefill a request that does not fit
    whole stops the loop.
    """
    pad = and_(
        policy.pads_short_admissions, k > 0, demand == 1, not_(prefill_scheduled),
        or_(running_scheduled, computed > 0), computed + 1 + k + 1 <= max_model_len,
    )
    pad_refused = and_(pad, policy.grant(p, 1 + k, budgets) < 1 + k)
    wanted = capped_by_threshold(ite(pad, 1 + k, demand), threshold)
    grant = policy.grant(p, wanted, budgets)
    unchunked_refused = and_(not_(chunked_prefill), grant < wanted)
    return Admission(grant, pad, or_(pad_refused, unchunked_refused))
