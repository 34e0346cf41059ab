"""The search space of replayable counterexamples: short traces from an empty system."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

import z3

from ..model import BudgetPolicy, decisions
from ..model.registry import policy_spec
from ..spec.intlike import BoolLike, IntLike, and_, ite, max_, min_, not_, or_
from ..spec.trace import AddOp, StepExpectation, StepOp, Trace, ViolationExpectation
from .pass_skeleton import PassConfig, PassResult, Slot, count, run_pass, scheduler_victim
from .solving import value
from .symbolic import SymbolicConfig

FAMILY_STEPS = 3
GROUP = "g"


class ExactKV:
    """The KV pool of a family trace, block_size 1: blocks are tokens.

    Blocks in use, each slot's blocks, and its share of the group's canonical prefix
    (``canon``: P for the member that published it, the hit count for the others). The
    cached prefix is P once a member was granted past it, else nothing.
    """

    def __init__(self, fam: "Family") -> None:
        self.fam = fam
        n = len(fam.requests)
        self.in_use: IntLike = 0
        self.held: list[IntLike] = [0] * n
        self.canon: list[IntLike] = [0] * n
        self.published: BoolLike = False

    @property
    def free(self) -> IntLike:
        return self.fam.sc.num_kv_blocks - self.in_use

    def _member(self, i: int) -> BoolLike:
        return and_(self.fam.sc.enable_prefix_caching, self.fam.requests[i].member)

    def running_fits(self, i: int, slots: IntLike) -> BoolLike:
        return max_(slots - self.held[i], 0) <= self.free

    def running_holds(self, i: int, slots: IntLike) -> BoolLike:
        return slots <= self.held[i]

    def allocate_running(self, i: int, slots: IntLike, cond: BoolLike) -> None:
        need = max_(slots - self.held[i], 0)
        self.in_use = self.in_use + ite(cond, need, 0)
        self.held[i] = ite(cond, max_(slots, self.held[i]), self.held[i])

    def hits(self, i: int) -> IntLike:
        drop = ite(self.fam.sc.drops_last_hit_block, 1, 0)
        return ite(and_(self._member(i), self.published), self.fam.prefix_len - drop, 0)

    def admission_fits(self, i: int, hits: IntLike, slots: IntLike, whole: IntLike) -> BoolLike:
        return and_(whole - hits <= self.free, slots - hits <= self.free)

    def allocate_admission(self, i: int, hits: IntLike, slots: IntLike, cond: BoolLike) -> None:
        self.in_use = self.in_use + ite(cond, slots - hits, 0)
        self.held[i] = ite(cond, slots, self.held[i])
        self.canon[i] = ite(and_(cond, self._member(i)), ite(self.published, hits, self.fam.prefix_len),
                            self.canon[i])

    def publish(self, i: int, tokens: IntLike, cond: BoolLike) -> None:
        granted = and_(cond, self._member(i))
        self.fam.constraints.append(or_(not_(granted), tokens >= self.fam.prefix_len))
        self.published = or_(self.published, granted)

    def preempt(self, i: int, cond: BoolLike) -> None:
        """Free slot i's blocks but those of the canonical prefix another member still holds."""
        shared = min_(self.canon[i], max_(0, *(c for u, c in enumerate(self.canon) if u != i)))
        self.in_use = self.in_use - ite(cond, self.held[i] - shared, 0)
        self.held[i] = ite(cond, 0, self.held[i])
        self.canon[i] = ite(cond, 0, self.canon[i])


@dataclass
class Request:
    """The free inputs of one request of the family."""

    present: z3.BoolRef
    step: z3.ArithRef  # added before this step
    prompt: z3.ArithRef
    priority: z3.ArithRef
    member: z3.BoolRef  # of the prefix group
    accepted: list[z3.ArithRef]  # drafts accepted in each step's output


def family_config(policy: BudgetPolicy, scheduled_tokens_set: bool, prefix: str = "",
                  fixed: Optional[dict[str, Any]] = None) -> SymbolicConfig:
    """The symbolic config of a family (pages of one token): its terms depend on these
    arguments alone, so families of every size can share one."""
    return SymbolicConfig(policy, scheduled_tokens_set, prefix, fixed={"block_size": 1, **(fixed or {})})


class Family:
    """Traces of up to ``n`` requests and ``steps`` steps under one policy; ``constraints``
    hold exactly for the traces of the family, ``passes`` are their steps, the last one
    the checked one."""

    def __init__(self, policy: BudgetPolicy, n: int, steps: int, scheduled_tokens_set: bool,
                 prefix: str = "", fixed: Optional[dict[str, Any]] = None, check_validation: bool = True,
                 sc: Optional[SymbolicConfig] = None) -> None:
        """``fixed`` pins config knobs; ``check_validation`` False drops the policy's own
        requirements (a config it refuses, run with validation bypassed); ``sc`` is
        ``family_config`` of the same arguments, built once for many families."""
        self.policy = policy
        self.steps = steps
        self.sc = family_config(policy, scheduled_tokens_set, prefix, fixed) if sc is None else sc
        assert self.sc.policy is policy and self.sc.scheduled_tokens_set == scheduled_tokens_set
        sc, p = self.sc, self.sc.params
        self.prefix_len = z3.Int(prefix + "prefix_len")
        self.requests = [
            Request(z3.Bool(f"{prefix}present{j}"), z3.Int(f"{prefix}step{j}"), z3.Int(f"{prefix}prompt{j}"),
                    z3.Int(f"{prefix}priority{j}"), z3.Bool(f"{prefix}member{j}"),
                    [z3.Int(f"{prefix}accepted{j}_{m}") for m in range(steps)])
            for j in range(n)
        ]
        self.constraints: list[Any] = [sc.domain, self.prefix_len >= 1, *([sc.accepts] if check_validation else [])]
        self._request_constraints()
        self.kv = ExactKV(self)
        self.config = cfg = PassConfig(policy, p, sc.lookahead, sc.long_prefill_token_threshold,
                                       p.priority_scheduling, scheduler_victim, sc.need)
        self.states: list[list[Slot]] = []
        self.passes: list[PassResult] = []
        slots = [Slot(False, False, False, r.prompt, 0, 0, r.priority, j) for j, r in enumerate(self.requests)]
        for m in range(steps):
            slots = [self._added(slot, r, m) for slot, r in zip(slots, self.requests)]
            self._waiting_order(slots)
            self.states.append(slots)
            result = run_pass(cfg, slots, self.kv)
            self.passes.append(result)
            if m < steps - 1:
                self.constraints += [not_(result.any_preempted), not_(result.crashed)]
                slots = self._update(slots, result, m)

    # -- the shape of a family trace ---------------------------------------------------
    def _request_constraints(self) -> None:
        sc, c = self.sc, self.constraints
        previous: Optional[Request] = None
        for r in self.requests:
            c += [z3.Implies(r.present, z3.And(r.step >= 0, r.step < self.steps, r.prompt >= 1,
                                               r.prompt <= sc.max_model_len - 1, r.priority >= 0)),
                  z3.Implies(r.member, z3.And(r.present, sc.enable_prefix_caching, r.prompt >= self.prefix_len + 1)),
                  *(z3.And(a >= 0, a <= sc.k) for a in r.accepted)]
            if previous is not None:  # arrival order is slot order
                c.append(z3.Implies(r.present, z3.And(previous.present, previous.step <= r.step)))
            previous = r

    def _added(self, slot: Slot, r: Request, m: int) -> Slot:
        new = and_(r.present, r.step == m)
        return Slot(or_(slot.present, new), slot.running, slot.decoding, slot.num_tokens, slot.computed,
                    slot.drafts, slot.priority, slot.arrival)

    def _waiting_order(self, slots: list[Slot]) -> None:
        """Under priority scheduling the waiting queue is sorted by (priority, arrival):
        the family keeps it in slot order."""
        waiting = [and_(s.present, not_(s.running)) for s in slots]
        for i in range(len(slots)):
            for j in range(i + 1, len(slots)):
                self.constraints.append(z3.Implies(z3.And(self.sc.params.priority_scheduling, waiting[i], waiting[j]),
                                                   slots[i].priority <= slots[j].priority))

    def _update(self, slots: list[Slot], result: PassResult, m: int) -> list[Slot]:
        """The end of ``SchedulerLoop.schedule`` (computed tokens advance) and
        ``update_from_output`` with each request's accepted drafts; nothing may finish."""
        p, loop, k = self.sc.params, self.policy.loop, self.sc.k
        max_len = p.max_model_len
        out = []
        for j, s in enumerate(slots):
            sched = result.scheduled[j]
            computed = ite(sched, result.computed_before[j] + result.grant[j], s.computed)
            prefill_chunk = ite(sched, computed < s.num_tokens, not_(s.decoding))
            emits = and_(sched, not_(prefill_chunk))
            taken = decisions.accepted_drafts(result.padded[j], self.requests[j].accepted[m], result.drafts[j])
            after = decisions.computed_after_output(loop.drafts_in_grant, computed, result.computed_before[j],
                                                    result.grant[j], s.num_tokens, taken)
            num_tokens = ite(emits, s.num_tokens + min_(1 + taken, max_len - s.num_tokens), s.num_tokens)
            self.constraints.append(or_(not_(emits), num_tokens < max_len))
            out.append(Slot(s.present, result.running_after[j], ite(emits, True, and_(s.decoding, not_(sched))),
                            num_tokens, ite(emits, after, computed), ite(emits, k, ite(sched, 0, s.drafts)),
                            s.priority, s.arrival))
        return out

    @property
    def last(self) -> PassResult:
        return self.passes[-1]

    def num_requests(self) -> IntLike:
        return count([r.present for r in self.requests])

    def objectives(self) -> list[Any]:
        """What a counterexample minimises, most important first."""
        sc = self.sc
        out = [sc.max_num_batched_tokens, sc.max_num_seqs, sc.k, self.num_requests(),
               z3.Sum([z3.If(r.present, r.prompt, 0) for r in self.requests]),
               sc.max_model_len, sc.num_kv_blocks, sc.long_prefill_token_threshold, self.prefix_len,
               z3.Sum([a for r in self.requests for a in r.accepted]),
               z3.Sum([z3.If(r.present, r.priority, 0) for r in self.requests])]
        if sc.scheduled_tokens_set:
            out.append(sc.max_num_scheduled_tokens)
        out.append(sc.selector)  # among equals, the earlier case: FCFS before priority
        return out

    # -- the trace ---------------------------------------------------------------------
    def trace(self, model: z3.ModelRef, violation: Optional[str], description: str, found_by: str) -> Trace:
        """The trace of a model: its config, adds and steps, each step expecting the grants
        the family computed, and the violation if one is named."""
        cfg = self.sc.concrete(model)
        present = [j for j, r in enumerate(self.requests) if value(model, r.present)]
        first = min((value(model, self.requests[j].step) for j in present), default=self.steps - 1)
        ops: list[Any] = []
        expect: list[Any] = []
        for m in range(first, self.steps):
            for j in present:
                r = self.requests[j]
                if value(model, r.step) != m:
                    continue
                member = value(model, r.member)
                ops.append(AddOp(f"r{j}", value(model, r.prompt), cfg["max_model_len"], value(model, r.priority),
                                 GROUP if member else None, value(model, self.prefix_len) if member else 0))
            accepted = {f"r{j}": value(model, self.requests[j].accepted[m]) for j in present
                        if value(model, self.requests[j].step) <= m}
            ops.append(StepOp({rid: a for rid, a in accepted.items() if a}))
            result = self.passes[m]
            if value(model, result.crashed):
                continue  # the model raises in this step (the last one) and grants nothing
            grants = {f"r{j}": value(model, result.grant[j]) for j in present if value(model, result.scheduled[j])}
            expect.append(StepExpectation(m - first, num_scheduled_tokens=grants))
        if violation is not None:
            expect.append(ViolationExpectation(violation))
        return Trace(policy_spec(self.policy), cfg, tuple(ops), tuple(expect), description, found_by)
