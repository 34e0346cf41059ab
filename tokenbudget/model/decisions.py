"""The per-request decisions of a scheduling pass and of its output, written over IntLike."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

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

    ``bypass``: the engine runs this decode whatever the budget (FastDeploy's worker). A
    request known to bypass never reaches ``policy.grant``: its budgets may be spent, which
    the grant's contract rules out.
    """
    wanted = capped_by_threshold(demand, threshold)
    grant = wanted if bypass is True else ite(bypass, wanted, policy.grant(p, wanted, budgets))
    return min_(grant, max_model_len - computed - 1)


def scheduled_drafts(drafts_in_grant: bool, drafts: IntLike, computed: IntLike, grant: IntLike,
                     num_tokens: IntLike, is_decode: BoolLike) -> IntLike:
    """Drafts that ride with a grant: those the grant covers past the known tokens when the
    grant counts drafts (vLLM), else every proposed draft of a decode (FastDeploy's worker)."""
    if drafts_in_grant:
        return max_(0, min_(drafts, computed + grant - num_tokens))
    return ite(is_decode, drafts, 0)


def admission(policy: BudgetPolicy, p: BudgetParams, budgets: Budgets, demand: IntLike, computed: IntLike,
              threshold: IntLike, max_model_len: IntLike, k: IntLike, pads: bool, prefill_scheduled: BoolLike,
              running_scheduled: BoolLike, chunked_prefill: BoolLike) -> Admission:
    """Decide for the head of the waiting queue, which wants ``demand`` past ``computed``.

    With ``pads`` (vLLM), a 1-token admission is padded to 1 + k when no prefill chunk ran
    this pass and either a running request was scheduled or the request has computed
    tokens (a prefix hit), and is refused un-padded. Without chunked prefill a request that
    does not fit whole stops the loop.
    """
    pad = and_(
        pads, k > 0, demand == 1, not_(prefill_scheduled),
        or_(running_scheduled, computed > 0), computed + 1 + k + 1 <= max_model_len,
    )
    pad_refused = and_(pad, policy.grant(p, 1 + k, budgets) < 1 + k)
    wanted = capped_by_threshold(ite(pad, 1 + k, demand), threshold)
    grant = policy.grant(p, wanted, budgets)
    unchunked_refused = and_(not_(chunked_prefill), grant < wanted)
    return Admission(grant, pad, or_(pad_refused, unchunked_refused))


def victim(priority_scheduling: BoolLike, running: Sequence[BoolLike], priority: Sequence[IntLike],
           arrival: Sequence[IntLike]) -> list[BoolLike]:
    """One-hot over requests in running-queue order: the running one vLLM preempts when an
    allocation fails, the largest (priority, arrival) under priority scheduling, else the
    tail of the running queue (all False when none runs)."""
    n = len(running)
    last, later = [], False
    for v in range(n - 1, -1, -1):
        last.append(and_(running[v], not_(later)))
        later = or_(later, running[v])
    last.reverse()
    found: BoolLike = False
    best: IntLike = 0
    best_priority: IntLike = 0
    best_arrival: IntLike = 0
    for v in range(n):
        beats = and_(running[v], or_(not_(found), priority[v] > best_priority,
                                     and_(priority[v] == best_priority, arrival[v] > best_arrival)))
        best = ite(beats, v, best)
        best_priority, best_arrival = ite(beats, priority[v], best_priority), ite(beats, arrival[v], best_arrival)
        found = or_(found, running[v])
    return [ite(priority_scheduling, and_(running[v], best == v), last[v]) for v in range(n)]


def accepted_drafts(padded: BoolLike, accepted: IntLike, drafts: IntLike) -> IntLike:
    """Drafts of a decode the output accepts: ``accepted`` clipped to those scheduled; a
    padded admission's placeholders are never accepted."""
    return ite(padded, 0, max_(0, min_(accepted, drafts)))


def computed_after_output(drafts_in_grant: bool, computed: IntLike, computed_before: IntLike, grant: IntLike,
                          num_tokens: IntLike, taken: IntLike) -> IntLike:
    """Computed tokens of a decode after its output, ``computed`` (= computed_before +
    grant) before it. A grant that counts drafts ran rows past the ``num_tokens`` known
    tokens: the drafts, or fewer when a padded admission was cut short (SPEC.md F1); the
    ``taken`` accepted ones stay computed and the others roll back. Drafts outside the grant
    (FastDeploy's worker) add the accepted ones."""
    if drafts_in_grant:
        draft_rows = computed_before + grant - num_tokens
        return computed - (draft_rows - taken)
    return computed + taken


def running_demand(num_tokens: IntLike, drafts: IntLike, computed: IntLike) -> IntLike:
    """What a running request still wants after a pass (computed already advanced): its
    tokens and drafts not yet computed, never negative."""
    return max_(0, num_tokens + drafts - computed)


def waiting_demand(num_tokens: IntLike, computed: IntLike) -> IntLike:
    """What a waiting request wants: its tokens not yet computed."""
    return num_tokens - computed


def unserved_total(max_num_seqs: IntLike, num_running: IntLike, wanted_running: IntLike,
                   wanted_waiting: IntLike) -> IntLike:
    """The demand a pass left unserved: the running requests', plus the waiting ones' while a
    sequence slot is free."""
    return wanted_running + ite(num_running < max_num_seqs, wanted_waiting, 0)


def unserved_demand(max_num_seqs: IntLike, running: Sequence[BoolLike], waiting: Sequence[BoolLike],
                    num_tokens: Sequence[IntLike], drafts: Sequence[IntLike],
                    computed: Sequence[IntLike]) -> IntLike:
    """``unserved_total`` over queued requests flagged running or waiting (the prover's
    slots); the model sums the same terms over its queues (``SchedulerLoop._unserved_demand``)."""
    wanted_running: IntLike = 0
    wanted_waiting: IntLike = 0
    for run, wait, n, d, c in zip(running, waiting, num_tokens, drafts, computed):
        if run is not False:  # a concrete False adds 0: skipped
            wanted_running = wanted_running + ite(run, running_demand(n, d, c), 0)
        if wait is not False:
            wanted_waiting = wanted_waiting + ite(wait, waiting_demand(n, c), 0)
    num_running = sum((ite(r, 1, 0) for r in running if r is not False), 0)
    return unserved_total(max_num_seqs, num_running, wanted_running, wanted_waiting)
