"""One scheduling pass over N request slots, unrolled, on ints or z3 terms alike."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Protocol, Sequence

from ..model import BudgetParams, BudgetPolicy, Budgets, decisions
from ..model.physical_need import PhysicalNeed
from ..spec import grant_rules
from ..spec.intlike import BoolLike, IntLike, and_, ite, max_, min_, not_, or_


@dataclass
class Slot:
    """One request as a pass sees it. ``running`` False with ``present`` means waiting."""

    present: BoolLike
    running: BoolLike
    decoding: BoolLike  # running and past its prefill (``Request.is_decoding``)
    num_tokens: IntLike  # prompt + outputs
    computed: IntLike
    drafts: IntLike  # drafts proposed for this step (``num_draft_tokens``)
    priority: IntLike
    arrival: IntLike


# Picks the victim of one preemption round: (config, slots, running flags) -> one-hot.
VictimRule = Callable[["PassConfig", Sequence[Slot], Sequence[BoolLike]], list[BoolLike]]


@dataclass(frozen=True)
class PassConfig:
    """What the pass reads besides the policy's BudgetParams; ``victim`` is the
    loop's rule (``scheduler_victim``) or a sound over-approximation of it."""

    policy: BudgetPolicy
    params: BudgetParams
    lookahead: IntLike  # L the loop reserves: the policy's
    threshold: IntLike  # long_prefill_token_threshold
    priority_scheduling: BoolLike
    victim: VictimRule
    need: PhysicalNeed  # the rows (and KV) a grant physically takes: the engine's method table


class KVModel(Protocol):
    """Where KV blocks come from. Methods with ``cond`` change state only when it holds."""

    def running_fits(self, i: int, slots: IntLike) -> BoolLike:
        """Would running slot i get blocks for ``slots`` KV slots now?"""

    def running_holds(self, i: int, slots: IntLike) -> BoolLike:
        """Does running slot i already hold blocks for ``slots`` KV slots (no new block)?"""

    def allocate_running(self, i: int, slots: IntLike, cond: BoolLike) -> None: ...

    def hits(self, i: int) -> IntLike:
        """Prefix-cache hit tokens waiting slot i finds now."""

    def admission_fits(self, i: int, hits: IntLike, slots: IntLike, whole: IntLike) -> BoolLike:
        """vLLM's whole-sequence gate and the allocation of ``slots`` after the hits."""

    def allocate_admission(self, i: int, hits: IntLike, slots: IntLike, cond: BoolLike) -> None: ...

    def publish(self, i: int, tokens: IntLike, cond: BoolLike) -> None:
        """``cache_full_blocks`` for slot i up to ``tokens``."""

    def preempt(self, i: int, cond: BoolLike) -> None: ...


@dataclass(frozen=True)
class LedgerEvent:
    happened: BoolLike
    kind: str  # grant | refund
    slot: int  # -1 for a refund: the victim is one of several
    before: Budgets
    after: Budgets
    charge: Budgets  # for a refund: what the refunded grant had charged


@dataclass
class PassResult:
    """What the pass did, per slot and as a whole (the symbolic StepRecord)."""

    initial: Budgets
    budgets: Budgets  # at the end of the pass
    scheduled: list[BoolLike]  # holds a grant at the end of the pass
    grant: list[IntLike]
    drafts: list[IntLike]  # scheduled draft tokens
    rows: list[IntLike]
    padded: list[BoolLike]
    prefill: list[BoolLike]  # in the StepRecord's prefill set
    computed_before: list[IntLike]
    charged_as_decode: list[BoolLike]
    preempted: list[BoolLike]
    running_after: list[BoolLike]
    ledger: list[LedgerEvent] = field(default_factory=list)
    crashed: BoolLike = False  # the waiting loop came to admit a grant <= 0 (the loop asserts: model-error)

    @property
    def any_preempted(self) -> BoolLike:
        return or_(*self.preempted)

    def total(self, values: Sequence[IntLike]) -> IntLike:
        return sum((ite(s, v, 0) for s, v in zip(self.scheduled, values)), 0)


def choose(cond: BoolLike, then: Budgets, other: Budgets) -> Budgets:
    inp = None if then.input is None else ite(cond, then.input, other.input)
    return Budgets(ite(cond, then.token, other.token), inp)


def count(conds: Sequence[BoolLike]) -> IntLike:
    return sum((ite(c, 1, 0) for c in conds), 0)


def run_pass(cfg: PassConfig, slots: Sequence[Slot], kv: KVModel) -> PassResult:
    """``SchedulerLoop.schedule`` over the slots: the running loop, then the waiting loop
    unless it preempted. Computed tokens are not advanced here."""
    policy, p = cfg.policy, cfg.params
    n = len(slots)
    num_decoding = count([and_(s.present, s.running, s.decoding) for s in slots])
    initial = policy.initial_budgets(p, num_decoding)
    num_eligible = count([s.present for s in slots])
    threshold = ite(num_eligible > 1, cfg.threshold, 0) if policy.loop.applies_long_prefill_threshold else 0
    out = PassResult(
        initial=initial, budgets=initial, scheduled=[False] * n, grant=[0] * n, drafts=[0] * n, rows=[0] * n,
        padded=[False] * n, prefill=[False] * n, computed_before=[s.computed for s in slots],
        charged_as_decode=[False] * n, preempted=[False] * n,
        running_after=[and_(s.present, s.running) for s in slots],
    )
    prefill_scheduled = _running_loop(cfg, slots, kv, out, threshold)
    _waiting_loop(cfg, slots, kv, out, threshold, prefill_scheduled)
    return out


def _running_loop(cfg: PassConfig, slots: Sequence[Slot], kv: KVModel, out: PassResult,
                  threshold: IntLike) -> BoolLike:
    policy, p, loop = cfg.policy, cfg.params, cfg.policy.loop
    max_len = p.max_model_len
    active: BoolLike = True  # the loop has not broken
    stopped: BoolLike = False  # FastDeploy: the budget stopped the visits; a decode runs on its own blocks or pauses
    prefill_scheduled: BoolLike = False
    skips: IntLike = 0  # running requests the cursor jumped over after a preemption (``cursor_after_preemption``)
    for i, s in enumerate(slots):
        visit = and_(active, out.running_after[i])
        jumped = and_(visit, skips > 0)
        skips = skips - ite(jumped, 1, 0)
        visit = and_(visit, not_(jumped))
        bypass = and_(loop.decodes_bypass_budget, s.decoding)
        may = policy.may_schedule(p, out.budgets) if loop.running_checks_exit_rule else True
        unvisited: BoolLike = False
        if loop.decodes_bypass_budget:
            stopped = or_(stopped, and_(visit, not_(may)))
            skip = and_(visit, stopped, not_(s.decoding))
            unvisited = and_(visit, stopped, s.decoding)
        else:
            skip = and_(visit, not_(may))
            active = and_(active, not_(skip))
        go = and_(visit, not_(skip))
        pending = s.num_tokens + s.drafts if loop.drafts_in_grant else s.num_tokens
        grant = loop.running_grant(policy, p, out.budgets, pending - s.computed, s.computed, threshold, max_len, bypass)
        tries = and_(go, grant > 0)
        drafts = decisions.scheduled_drafts(loop.drafts_in_grant, s.drafts, s.computed, grant, s.num_tokens,
                                            s.decoding)
        kv_tokens = grant if loop.drafts_in_grant else grant + drafts  # drafts outside the grant write KV too
        need_slots = grant_rules.kv_slots_needed(s.computed, kv_tokens, cfg.lookahead, max_len)
        runs_on_own = and_(tries, unvisited, kv.running_holds(i, need_slots))
        allocates = and_(tries, not_(unvisited))
        self_preempted: BoolLike = False
        for _ in range(len(slots)):  # each round preempts one victim while the allocation fails
            fails = and_(allocates, not_(self_preempted), not_(kv.running_fits(i, need_slots)))
            victims = [and_(fails, v) for v in cfg.victim(cfg, slots, out.running_after)]
            skips = skips + _cursor_jump(loop, out.running_after, victims, i)
            _preempt(cfg, kv, out, victims)
            self_preempted = or_(self_preempted, victims[i])
        scheduled = or_(runs_on_own, and_(allocates, not_(self_preempted)))
        active = and_(active, not_(and_(allocates, self_preempted)))
        kv.allocate_running(i, need_slots, scheduled)
        kv.publish(i, min_(s.computed + grant, s.num_tokens), scheduled)
        _grant(cfg, out, i, scheduled, grant, drafts, s.decoding, False, and_(not_(s.decoding),
                                                                              s.computed < s.num_tokens - 1))
        prefill_scheduled = or_(prefill_scheduled, and_(scheduled, not_(s.decoding)))
    return prefill_scheduled


def scheduler_victim(cfg: PassConfig, slots: Sequence[Slot], running: Sequence[BoolLike]) -> list[BoolLike]:
    """One-hot: the running request the loop preempts (the loop's ``victim``; the shared one
    takes the largest (priority, arrival) under priority scheduling, the tail of the running
    queue under FCFS, the only order FastDeploy schedules in)."""
    loop = cfg.policy.loop
    return loop.victim(cfg.priority_scheduling, running, [s.priority for s in slots],  # type: ignore[no-any-return]
                       [s.arrival for s in slots])


def _cursor_jump(loop: type, running: Sequence[BoolLike], victims: Sequence[BoolLike], i: int) -> IntLike:
    """How many running requests after slot i the cursor jumps over when the picked victim
    (one-hot, another slot) leaves the running queue: the loop's ``cursor_after_preemption``
    against the position slot i really moves to. Never negative."""
    here = count(running[:i])
    jump: IntLike = 0
    for v, picked in enumerate(victims):
        if v == i:
            continue
        there = count(running[:v])
        moved = loop.cursor_after_preemption(here, there) - (here - (1 if v < i else 0))
        jump = jump + ite(picked, max_(0, moved), 0)
    return jump


def _preempt(cfg: PassConfig, kv: KVModel, out: PassResult, victims: Sequence[BoolLike]) -> None:
    """Preempt the one victim picked (``victims`` one-hot, all False for none): refund its
    grant if it holds one, free its blocks."""
    policy, p = cfg.policy, cfg.params
    unschedules = cfg.policy.loop.unschedules_refunded
    refunded = [and_(picked, out.scheduled[v]) for v, picked in enumerate(victims)]
    refund = _pick(refunded, [policy.refund(p, out.grant[v], out.charged_as_decode[v]) for v in range(len(victims))])
    charge = _pick(refunded, [policy.charge(p, out.grant[v], out.charged_as_decode[v]) for v in range(len(victims))])
    before = out.budgets
    after = policy.spend(before, refund, +1)
    happened = or_(*refunded)
    out.ledger.append(LedgerEvent(happened, "refund", -1, before, after, charge))
    out.budgets = choose(happened, after, before)
    for v, picked in enumerate(victims):
        if unschedules:
            out.scheduled[v] = and_(out.scheduled[v], not_(picked))
        out.running_after[v] = and_(out.running_after[v], not_(picked))
        out.preempted[v] = or_(out.preempted[v], picked)
        kv.preempt(v, picked)


def _pick(onehot: Sequence[BoolLike], values: Sequence[Budgets]) -> Budgets:
    """The Budgets of the one condition that holds; zero where none does."""
    token = sum((ite(c, b.token, 0) for c, b in zip(onehot, values)), 0)
    inp = None if values[0].input is None else sum((ite(c, b.input, 0) for c, b in zip(onehot, values)), 0)
    return Budgets(token, inp)


def _grant(cfg: PassConfig, out: PassResult, i: int, cond: BoolLike, grant: IntLike, drafts: IntLike,
           is_decode: BoolLike, padded: BoolLike, prefill: BoolLike) -> None:
    """``StepPass.record_grant`` when cond."""
    policy, p = cfg.policy, cfg.params
    before = out.budgets
    charge = policy.charge(p, grant, is_decode)
    after = policy.spend(before, charge, -1)
    out.ledger.append(LedgerEvent(cond, "grant", i, before, after, charge))
    out.budgets = choose(cond, after, before)
    out.scheduled[i] = or_(out.scheduled[i], cond)
    out.grant[i] = ite(cond, grant, out.grant[i])
    out.drafts[i] = ite(cond, drafts, out.drafts[i])
    out.rows[i] = ite(cond, cfg.need.runner_rows(grant, is_decode), out.rows[i])
    out.padded[i] = or_(out.padded[i], and_(cond, padded))
    out.prefill[i] = or_(out.prefill[i], and_(cond, prefill))
    out.charged_as_decode[i] = ite(cond, is_decode, out.charged_as_decode[i])


def _waiting_loop(cfg: PassConfig, slots: Sequence[Slot], kv: KVModel, out: PassResult, threshold: IntLike,
                  prefill_scheduled: BoolLike) -> None:
    policy, p = cfg.policy, cfg.params
    k, max_len = p.num_speculative_tokens, p.max_model_len
    active = not_(out.any_preempted)
    running = count(out.running_after)
    running_scheduled = or_(*out.scheduled)  # ``bool(step.scheduled_running)``: only running-loop grants so far
    for i, s in enumerate(slots):
        visit = and_(active, s.present, not_(s.running))
        hits = kv.hits(i)
        decision = policy.loop.admission(policy, p, out.budgets, s.num_tokens - hits, hits, threshold, max_len, k,
                                         prefill_scheduled, running_scheduled, p.enable_chunked_prefill)
        need_slots = grant_rules.kv_slots_needed(hits, decision.grant, cfg.lookahead, max_len)
        fits = kv.admission_fits(i, hits, need_slots, min_(s.num_tokens, max_len))
        may = policy.may_schedule(p, out.budgets) if policy.loop.waiting_checks_exit_rule else True
        attempts = and_(visit, may, running < p.max_num_seqs, not_(decision.stop))
        admit = and_(attempts, fits)
        active = and_(active, or_(not_(visit), admit))
        out.crashed = or_(out.crashed, and_(attempts, decision.grant <= 0))  # the loop asserts before allocating
        kv.allocate_admission(i, hits, need_slots, admit)
        kv.publish(i, min_(hits + decision.grant, s.num_tokens), admit)
        out.computed_before[i] = ite(admit, hits, out.computed_before[i])
        out.running_after[i] = or_(out.running_after[i], admit)
        running = running + ite(admit, 1, 0)
        _grant(cfg, out, i, admit, decision.grant, ite(decision.padded, k, 0), False, decision.padded,
               hits < s.num_tokens - 1)
