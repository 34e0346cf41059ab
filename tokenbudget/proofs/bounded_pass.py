"""Bounded proofs: one pass from *any* state of up to N requests.

The pre-state is symbolic per slot: in the running queue (decoding or mid-prefill) or
waiting, with its token count, computed tokens, drafts, priority, arrival and the prefix
hit its admission would find; the KV pool is abstract (``AbstractKV``): how many blocks
each allocation needs, whether vLLM's whole-sequence gate lets an admission through and
how many blocks a preemption frees are free variables against one free-block counter, so
every allocation outcome and every victim is covered. The state constraints are facts
of every state the Scheduler reaches (listed in ``state_facts``), so an UNSAT answer
proves the invariant for one pass from any reachable state with at most N requests,
for every config the policy accepts. A SAT answer may come from an unreachable state:
refutations come from ``family.py`` instead.
"""
from __future__ import annotations

from typing import Any, Callable, Optional, Sequence

import z3

from ..model import BudgetPolicy, OnePassLoop
from ..spec.intlike import BoolLike, IntLike, ite
from .pass_skeleton import PassConfig, Slot, run_pass, scheduler_victim
from .solving import check, solver
from .symbolic import SymbolicConfig


class AbstractKV:
    """Allocation outcomes as free variables: sound for any pool, prefix cache and eviction.

    For every concrete pass there is an assignment reproducing it: a request needs the
    same number of new blocks on every retry (others' frees do not change its blocks),
    an allocation takes exactly the blocks it needed, a preemption frees some number of
    blocks, and the gate is a yes or no.
    """

    def __init__(self, n: int, prefix: str) -> None:
        self.free: IntLike = z3.Int(prefix + "kv_free")
        self.need_running = [z3.Int(f"{prefix}need_run{i}") for i in range(n)]
        self.need_admission = [z3.Int(f"{prefix}need_adm{i}") for i in range(n)]
        self.gate = [z3.Bool(f"{prefix}gate{i}") for i in range(n)]
        self.freed = [z3.Int(f"{prefix}freed{i}") for i in range(n)]
        self.hit = [z3.Int(f"{prefix}hit{i}") for i in range(n)]
        self.facts: list[Any] = [self.free >= 0, *(v >= 0 for v in self.need_running + self.need_admission + self.freed)]

    def running_fits(self, i: int, slots: IntLike) -> BoolLike:
        return self.need_running[i] <= self.free

    def running_holds(self, i: int, slots: IntLike) -> BoolLike:
        return self.need_running[i] == 0

    def allocate_running(self, i: int, slots: IntLike, cond: BoolLike) -> None:
        self.free = self.free - ite(cond, self.need_running[i], 0)

    def hits(self, i: int) -> IntLike:
        return self.hit[i]

    def admission_fits(self, i: int, hits: IntLike, slots: IntLike, whole: IntLike) -> BoolLike:
        return z3.And(self.gate[i], self.need_admission[i] <= self.free)

    def allocate_admission(self, i: int, hits: IntLike, slots: IntLike, cond: BoolLike) -> None:
        self.free = self.free - ite(cond, self.need_admission[i], 0)

    def publish(self, i: int, tokens: IntLike, cond: BoolLike) -> None:
        """Publishing only changes future hits, which are free here."""

    def preempt(self, i: int, cond: BoolLike) -> None:
        self.free = self.free + ite(cond, self.freed[i], 0)


class AbstractState:
    """N slots in any reachable state under one SymbolicConfig and the pass run from it
    (``result``); ``facts`` constrain the state and the pass's free choices."""

    def __init__(self, policy: BudgetPolicy, n: int, scheduled_tokens_set: bool, assume_seq_cap: bool,
                 prefix: str = "", fixed: Optional[dict[str, Any]] = None, check_validation: bool = True) -> None:
        self.sc = sc = SymbolicConfig(policy, scheduled_tokens_set, prefix, fixed=fixed)
        p = sc.params
        self.kv = AbstractKV(n, prefix)
        self.slots = [
            Slot(z3.Bool(f"{prefix}present{i}"), z3.Bool(f"{prefix}running{i}"), z3.Bool(f"{prefix}decoding{i}"),
                 z3.Int(f"{prefix}tokens{i}"), z3.Int(f"{prefix}computed{i}"), z3.Int(f"{prefix}drafts{i}"),
                 z3.Int(f"{prefix}priority{i}"), z3.Int(f"{prefix}arrival{i}"))
            for i in range(n)
        ]
        self.prefix = prefix
        self.choices: list[Any] = []
        self.config = PassConfig(policy, p, sc.lookahead, sc.long_prefill_token_threshold, p.priority_scheduling,
                                 self.any_victim, sc.need)
        self.result = run_pass(self.config, self.slots, self.kv)
        self.facts: list[Any] = [sc.domain, *([sc.accepts] if check_validation else []), *self.kv.facts,
                                 *self.state_facts(assume_seq_cap), *self.choices]

    def any_victim(self, cfg: PassConfig, slots: Sequence[Slot], running: Sequence[BoolLike]) -> list[BoolLike]:
        """FCFS: the Scheduler's victim, the tail of the running queue. Priority scheduling:
        any running request (a free choice), which covers the Scheduler's largest
        (priority, arrival) and keeps the unrolled pass from growing exponentially harder."""
        exact = scheduler_victim(cfg, slots, running)
        choice = z3.Int(f"{self.prefix}victim{len(self.choices)}")
        free = [z3.And(running[v], choice == v) for v in range(len(slots))]
        self.choices.append(z3.Or(z3.Not(z3.Or(*running)), *free))
        return [ite(cfg.priority_scheduling, free[v], exact[v]) for v in range(len(slots))]

    def state_facts(self, assume_seq_cap: bool) -> list[Any]:
        """What every state between two passes satisfies."""
        sc, p, kv = self.sc, self.sc.params, self.kv
        out: list[Any] = []
        for i, s in enumerate(self.slots):
            out += [
                z3.Implies(s.running, s.present), z3.Implies(s.decoding, s.running),
                z3.Implies(s.present, z3.And(s.num_tokens >= 1, s.num_tokens <= p.max_model_len - 1)),
                # a decode has sampled a token, computed all but it, and k drafts were proposed
                z3.Implies(s.decoding, z3.And(s.num_tokens >= 2, s.computed == s.num_tokens - 1,
                                              s.drafts == p.num_speculative_tokens)),
                # a running prefill chunk was granted at least one token
                z3.Implies(z3.And(s.running, z3.Not(s.decoding)),
                           z3.And(s.computed >= 1, s.computed <= s.num_tokens - 1, s.drafts == 0)),
                z3.Implies(z3.Not(s.running), z3.And(s.computed == 0, s.drafts == 0)),
                # a waiting request's prefix hit never covers its last token
                kv.hit[i] >= 0, kv.hit[i] <= z3.If(sc.enable_prefix_caching, s.num_tokens - 1, 0),
            ]
            for j in range(i + 1, len(self.slots)):
                t = self.slots[j]
                out.append(s.arrival != t.arrival)
                # the waiting queue is sorted by (priority, arrival) under priority scheduling
                out.append(z3.Implies(z3.And(p.priority_scheduling, s.present, z3.Not(s.running), t.present,
                                             z3.Not(t.running)),
                                      z3.Or(s.priority < t.priority,
                                            z3.And(s.priority == t.priority, s.arrival < t.arrival))))
        if assume_seq_cap:
            out.append(z3.Sum([z3.If(s.running, 1, 0) for s in self.slots]) <= p.max_num_seqs)
        return out


def holds_up_to(policy: BudgetPolicy, violated: Callable[[AbstractState], BoolLike], n: int, timeout_s: float,
                what: str, assume_seq_cap: bool, fixed: Optional[dict[str, Any]] = None,
                check_validation: bool = True, scheduled_tokens_set: Sequence[bool] = (False, True)) -> bool:
    """True when no pass from any reachable state of at most ``n`` requests is ``violated``,
    for each setting of ``max_num_scheduled_tokens`` in ``scheduled_tokens_set`` (unset,
    set). Raises Unknown on a z3 timeout. Only for a loop the pass skeleton models
    (a ``OnePassLoop``)."""
    assert issubclass(policy.loop, OnePassLoop), f"the pass skeleton does not model {policy.loop.__name__} ({what})"
    for scheduled_set in scheduled_tokens_set:
        state = AbstractState(policy, n, scheduled_set, assume_seq_cap, fixed=fixed, check_validation=check_validation)
        if check(solver(timeout_s, *state.facts, violated(state)), f"{what} (one pass, {n} requests)"):
            return False
    return True
