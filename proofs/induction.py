"""Unbounded proofs by induction over the ledger points of a pass.

An abstract **ledger point** of one pass (``Point``) holds what the five ledger
invariants talk about: the running requests, D0 (decoding at the start of the pass),
the decodes visited so far, and the live grants summed per class (prefill chunks,
decodes): their number and the sum of their grants. A policy's charge, refund and
runner rows are affine in the grant within a class (checked, not assumed), so the live
charges and rows are exact functions of those sums: ``n * f(0) + G * (f(1) - f(0))``.

The **steps** between ledger points over-approximate everything the Scheduler's pass
can do, with the policy's own functions on z3 terms: a running-loop grant
(``decisions.running_grant``, after the policy's exit rule unless the decode bypasses
the budget), an admission (``decisions.admission``, while fewer than S run), a refund
of any live grant (only under priority scheduling: an FCFS victim is the tail of the
running queue, never scheduled yet in the pass), a preemption of an unscheduled
request, and the boundary to the next pass (finishes, then ``initial_budgets`` for any
D0 up to the running requests). Demands, computed tokens, prefix hits, the threshold
and the padding conditions are free within what a request's state allows.

**Houdini**: the candidates are the five invariants, the token budget being >= 0 and
D0 <= S. Candidates false at the empty system, or broken by one step from a point
where all surviving candidates hold, are dropped until none is. What survives is an
inductive invariant, so it holds after any number of requests in any order of grants
and refunds, for every config the policy accepts. Then each grant step is checked for
the **decision properties** ``model-len`` and ``spec-shape`` from any point of that
invariant. A dropped invariant or a failed property is not refuted: the step may start
from an unreachable point; the bounded search decides (``obligations.py``).
"""
from __future__ import annotations

import itertools
import time
from dataclasses import dataclass, field
from typing import Callable, Optional

import z3

from ..model import BudgetPolicy, Budgets
from ..model.decisions import admission, running_grant, scheduled_drafts
from .solving import check, solver, value
from .symbolic import SymbolicConfig

LEDGER_INVARIANTS = ("input-budget-nonnegative", "token-cap", "input-rows-cap", "exact-refund", "seq-cap")
DECISION_PROPERTIES = ("model-len", "spec-shape")
PREFILL, DECODE = False, True


@dataclass(frozen=True)
class Point:
    """An abstract ledger point; index 0 of ``n``/``g`` is the prefill class, 1 the decode class."""

    run: z3.ArithRef
    d0: z3.ArithRef
    visited: z3.ArithRef
    n: tuple[z3.ArithRef, z3.ArithRef]
    g: tuple[z3.ArithRef, z3.ArithRef]
    budgets: Budgets


@dataclass(frozen=True)
class Decision:
    """What a grant step records for the request: the StepRecord fields of
    ``model-len`` and ``spec-shape``."""

    grant: z3.ArithRef
    computed: z3.ArithRef
    drafts: z3.ArithRef
    padded: z3.BoolRef
    prefill: z3.BoolRef


@dataclass(frozen=True)
class Step:
    name: str
    guard: z3.BoolRef
    post: Point
    decision: Optional[Decision] = None


@dataclass
class InductionResult:
    """Which obligations induction proves for one policy, and why not the others."""

    proved: dict[str, bool] = field(default_factory=dict)
    reasons: dict[str, str] = field(default_factory=dict)  # why an obligation is not proved this way
    notes: dict[str, str] = field(default_factory=dict)  # vacuous proofs, said so
    seconds: float = 0.0


def prove_by_induction(policy: BudgetPolicy, timeout_s: float, fixed: Optional[dict] = None,
                       check_validation: bool = True) -> InductionResult:
    """Houdini, then the decision properties, for ``max_num_scheduled_tokens`` unset and
    set; an obligation is proved when it holds in both. ``fixed`` pins config knobs;
    ``check_validation`` False drops the policy's requirements (for config-complete).
    Raises Unknown on a z3 timeout."""
    start = time.perf_counter()
    out = InductionResult()
    for scheduled_set in (False, True):
        run = _Houdini(policy, SymbolicConfig(policy, scheduled_set, fixed=fixed), timeout_s, check_validation)
        run.solve()
        for name, why in run.failed.items():
            out.reasons.setdefault(name, why)
        out.notes.update(run.notes)
    for name in LEDGER_INVARIANTS + DECISION_PROPERTIES:
        out.proved[name] = name not in out.reasons
    out.seconds = time.perf_counter() - start
    return out


class _Houdini:
    def __init__(self, policy: BudgetPolicy, sc: SymbolicConfig, timeout_s: float, check_validation: bool) -> None:
        self.policy, self.sc, self.p, self.timeout_s = policy, sc, sc.params, timeout_s
        self.config = [sc.domain, sc.accepts] if check_validation else [sc.domain]
        self._names = itertools.count()  # per proof, so that a proof's queries (and times) repeat exactly
        self.notes: dict[str, str] = {}
        self.failed: dict[str, str] = {}
        self.dropped: dict[str, str] = {}  # candidate -> the step that broke it
        self.has_input = policy.initial_budgets(self.p, z3.Int("probe_d0")).input is not None
        self.max_decode_grant = 1 + (self.p.num_speculative_tokens if policy.drafts_in_grant else 0)
        self.sums = self._affine_sums()
        self.candidates = self._candidates()
        self.alive = set(self.candidates)

    # -- the abstraction ---------------------------------------------------------------
    def _affine_sums(self) -> Optional[dict[str, Callable[[Point], z3.ArithRef]]]:
        """Live charge, refund and rows as functions of a point; None (with a reason for
        every ledger invariant) when some of them is not affine in the grant."""
        policy, p = self.policy, self.p
        parts: dict[str, Callable[[z3.ArithRef, bool], z3.ArithRef]] = {
            "charge.token": lambda g, dec: policy.charge(p, g, dec).token,
            "refund.token": lambda g, dec: policy.refund(p, g, dec).token,
            "runner rows": lambda g, dec: policy.runner_rows(p, g, dec),
        }
        if self.has_input:
            parts["charge.input"] = lambda g, dec: _input(policy.charge(p, g, dec))
            parts["refund.input"] = lambda g, dec: _input(policy.refund(p, g, dec))
        g = z3.Int("affine_g")
        for name, fn in parts.items():
            for cls in (PREFILL, DECODE):
                zero, one = fn(z3.IntVal(0), cls), fn(z3.IntVal(1), cls)
                s = solver(self.timeout_s, *self.config, g >= 0, fn(g, cls) != zero + g * (one - zero))
                if check(s, f"{self.policy.name}: is {name} affine"):
                    why = (f"{name} of a {'decode' if cls else 'prefill chunk'} is not affine in the grant "
                           f"(grant {value(s.model(), g)}), so the live charges cannot be summed")
                    self.failed.update({n: why for n in LEDGER_INVARIANTS + DECISION_PROPERTIES})
                    return None

        def total(fn: Callable[[z3.ArithRef, bool], z3.ArithRef]) -> Callable[[Point], z3.ArithRef]:
            def at(pt: Point) -> z3.ArithRef:
                return z3.Sum([pt.n[c] * fn(z3.IntVal(0), bool(c)) +
                               pt.g[c] * (fn(z3.IntVal(1), bool(c)) - fn(z3.IntVal(0), bool(c))) for c in (0, 1)])
            return at

        return {name: total(fn) for name, fn in parts.items()}

    def _candidates(self) -> dict[str, Callable[[Point], z3.BoolRef]]:
        p, policy, sums = self.p, self.policy, self.sums
        if sums is None:
            return {}

        def identity(pt: Point) -> z3.BoolRef:
            initial = policy.initial_budgets(p, pt.d0)
            same = [pt.budgets.token == initial.token - sums["charge.token"](pt)]
            if self.has_input:
                same.append(pt.budgets.input == initial.input - sums["charge.input"](pt))
            return z3.And(same)

        out: dict[str, Callable[[Point], z3.BoolRef]] = {
            "seq-cap": lambda pt: pt.run <= p.max_num_seqs,
            "token-cap": lambda pt: pt.g[0] + pt.g[1] <= policy.token_cap(p),
            "input-rows-cap": lambda pt: sums["runner rows"](pt) <= p.max_num_batched_tokens,
            "exact-refund": identity,  # budgets = initial - the live charges
            "token-budget-nonnegative": lambda pt: pt.budgets.token >= 0,
            "decodes-at-start-within-S": lambda pt: pt.d0 <= p.max_num_seqs,
        }
        if self.has_input:
            out["input-budget-nonnegative"] = lambda pt: pt.budgets.input >= 0
        else:
            self.notes["input-budget-nonnegative"] = "vacuous: the policy keeps no input budget"
        return out

    def _name(self, stem: str) -> str:
        return f"{stem}_{next(self._names)}"

    def _point(self) -> Point:
        i = next(self._names)
        ints = z3.Ints(" ".join(f"{name}_{i}" for name in ("run", "d0", "visited", "n0", "n1", "g0", "g1")))
        token = z3.Int(f"token_{i}")
        inp = z3.Int(f"input_{i}") if self.has_input else None
        return Point(ints[0], ints[1], ints[2], (ints[3], ints[4]), (ints[5], ints[6]), Budgets(token, inp))

    def _structure(self, pt: Point) -> z3.BoolRef:
        """Facts of every ledger point by construction: every grant is >= 1 token, a decode's
        at most 1 + its drafts, scheduled requests are running, decodes granted were
        decoding at the start of the pass."""
        return z3.And(pt.n[0] >= 0, pt.n[1] >= 0, pt.g[0] >= pt.n[0], pt.g[1] >= pt.n[1], pt.d0 >= 0,
                      pt.g[1] <= pt.n[1] * self.max_decode_grant,
                      pt.n[1] <= pt.visited, pt.visited <= pt.d0, pt.n[0] + pt.n[1] <= pt.run)

    # -- steps -------------------------------------------------------------------------
    def _steps(self, pre: Point) -> list[Step]:
        return [self._running_grant(pre, PREFILL), self._running_grant(pre, DECODE), self._admission(pre),
                self._refund(pre, PREFILL), self._refund(pre, DECODE), self._preempt_unscheduled(pre),
                self._next_pass(pre)]

    def _running_grant(self, pre: Point, cls: bool) -> Step:
        policy, p = self.policy, self.p
        demand, computed = z3.Int(self._name("demand")), z3.Int(self._name("computed"))
        threshold = z3.If(z3.Bool(self._name("threshold")), self.sc.long_prefill_token_threshold, 0)
        drafts = z3.Int(self._name("drafts"))  # proposed: k for a decode, 0 for a prefill chunk
        num_tokens = computed + (1 if cls else demand)
        facts = [demand >= 1, computed >= 0, num_tokens <= p.max_model_len - 1]
        if cls:  # a decode: only its last sampled token and its drafts are left
            facts += [drafts == p.num_speculative_tokens, pre.visited < pre.d0,
                      demand == 1 + (drafts if policy.drafts_in_grant else 0)]
        else:
            facts.append(drafts == 0)
        bypass = policy.decodes_bypass_budget and cls
        grant = running_grant(policy, p, pre.budgets, demand, computed, threshold, p.max_model_len, bypass)
        guard = z3.And(*facts, pre.run - pre.n[0] - pre.n[1] >= 1, grant > 0,
                       True if bypass else policy.may_schedule(p, pre.budgets))
        post = self._granted(pre, cls, grant, visited=pre.visited + (1 if cls else 0), run=pre.run)
        record = Decision(grant, computed,
                          scheduled_drafts(policy.drafts_in_grant, drafts, computed, grant, num_tokens, cls),
                          z3.BoolVal(False), z3.And(not cls, computed < num_tokens - 1))
        return Step(f"a running-loop grant to a {'decode' if cls else 'prefill chunk'}", guard, post, record)

    def _admission(self, pre: Point) -> Step:
        policy, p = self.policy, self.p
        demand, hits = z3.Int(self._name("demand")), z3.Int(self._name("hits"))
        threshold = z3.If(z3.Bool(self._name("threshold")), self.sc.long_prefill_token_threshold, 0)
        decision = admission(policy, p, pre.budgets, demand, hits, threshold, p.max_model_len,
                             p.num_speculative_tokens, z3.Bool(self._name("prefill_scheduled")),
                             z3.Bool(self._name("running_scheduled")), p.enable_chunked_prefill)
        guard = z3.And(demand >= 1, hits >= 0, hits + demand <= p.max_model_len - 1,
                       policy.may_schedule(p, pre.budgets), pre.run < p.max_num_seqs,
                       z3.Not(decision.stop), decision.grant > 0)
        post = self._granted(pre, PREFILL, decision.grant, visited=pre.visited, run=pre.run + 1)
        record = Decision(decision.grant, hits, z3.If(decision.padded, p.num_speculative_tokens, 0),
                          decision.padded, hits < hits + demand - 1)
        return Step("an admission", guard, post, record)

    def _granted(self, pre: Point, cls: bool, grant: z3.ArithRef, visited: z3.ArithRef, run: z3.ArithRef) -> Point:
        charged = self.policy.spend(pre.budgets, self.policy.charge(self.p, grant, cls), -1)
        n, g = list(pre.n), list(pre.g)
        n[cls] = n[cls] + 1
        g[cls] = g[cls] + grant
        return Point(run, pre.d0, visited, (n[0], n[1]), (g[0], g[1]), charged)

    def _refund(self, pre: Point, cls: bool) -> Step:
        grant = z3.Int(self._name("refunded"))
        rest = pre.n[cls] - 1
        guard = z3.And(self.p.priority_scheduling, rest >= 0, grant >= 1, pre.g[cls] - grant >= rest,
                       *((grant <= self.max_decode_grant, pre.g[cls] - grant <= rest * self.max_decode_grant)
                         if cls else ()))
        budgets = self.policy.spend(pre.budgets, self.policy.refund(self.p, grant, cls), +1)
        n, g = list(pre.n), list(pre.g)
        n[cls] = n[cls] - 1
        g[cls] = g[cls] - grant
        post = Point(pre.run - 1, pre.d0, pre.visited, (n[0], n[1]), (g[0], g[1]), budgets)
        return Step(f"a same-step refund of a {'decode' if cls else 'prefill chunk'}", guard, post)

    @staticmethod
    def _preempt_unscheduled(pre: Point) -> Step:
        post = Point(pre.run - 1, pre.d0, pre.visited, pre.n, pre.g, pre.budgets)
        return Step("a preemption of an unscheduled request", pre.run - pre.n[0] - pre.n[1] >= 1, post)

    def _next_pass(self, pre: Point) -> Step:
        start = self._start()
        return Step("the start of the next pass", z3.And(0 <= start.d0, start.d0 <= start.run, start.run <= pre.run),
                    start)

    def _start(self) -> Point:
        """A point at the start of a pass: nothing granted, the policy's initial budgets."""
        run, d0 = z3.Int(self._name("run")), z3.Int(self._name("d0"))
        zero = z3.IntVal(0)
        return Point(run, d0, zero, (zero, zero), (zero, zero), self.policy.initial_budgets(self.p, d0))

    # -- the fixpoint, then the decision properties ----------------------------------------
    def solve(self) -> None:
        if self.sums is None:
            return
        empty = self._start()
        self._prune(Step("the empty system", z3.And(empty.run == 0, empty.d0 == 0), empty), None)
        changed = True
        while changed:
            changed = False
            pre = self._point()
            for step in self._steps(pre):
                changed |= self._prune(step, pre)
        for name in LEDGER_INVARIANTS:
            if name in self.candidates and name not in self.alive:
                self.failed[name] = self.dropped[name]
        pre = self._point()
        context = [*self.config, self._structure(pre), *(self.candidates[c](pre) for c in self.alive)]
        for step in self._steps(pre):
            if step.decision is not None:
                self._decision_properties(step, context)

    def _prune(self, step: Step, pre: Optional[Point]) -> bool:
        """Drop the candidates that the step can break; True when some were dropped."""
        dropped = False
        while self.alive:
            assumptions = [*self.config, step.guard]
            if pre is not None:
                assumptions += [self._structure(pre), *(self.candidates[c](pre) for c in self.alive)]
            goals = {c: self.candidates[c](step.post) for c in self.alive}
            s = solver(self.timeout_s, *assumptions, z3.Not(z3.And(self._structure(step.post), *goals.values())))
            if not check(s, f"{self.policy.name}: {step.name}"):
                return dropped
            model = s.model()
            if not z3.is_true(model.eval(self._structure(step.post), model_completion=True)):
                raise AssertionError(f"{self.policy.name}: {step.name} leaves the ledger abstraction (prover bug)")
            for c, goal in goals.items():
                if not z3.is_true(model.eval(goal, model_completion=True)):
                    self.alive.discard(c)
                    self.dropped[c] = f"not inductive: {step.name} can break it ({self._describe(model)})"
            dropped = True
        return dropped

    def _decision_properties(self, step: Step, context: list) -> None:
        d, p = step.decision, self.p
        assert d is not None
        k = p.num_speculative_tokens
        properties = {
            "model-len": d.computed + d.grant + 1 <= p.max_model_len,
            "spec-shape": z3.And(d.drafts <= k, z3.Not(z3.And(d.drafts > 0, d.prefill)),
                                 z3.Implies(d.padded, z3.And(d.grant == 1 + k, d.drafts == k))),
        }
        for name, holds in properties.items():
            if name in self.failed:
                continue
            s = solver(self.timeout_s, *context, step.guard, z3.Not(holds))
            if check(s, f"{self.policy.name}: {name} of {step.name}"):
                self.failed[name] = f"{step.name} can break it ({self._describe(s.model())})"

    def _describe(self, model: z3.ModelRef) -> str:
        cfg = self.sc.concrete(model)
        knobs = [f"B={cfg['max_num_batched_tokens']}", f"S={cfg['max_num_seqs']}",
                 f"k={cfg['num_speculative_tokens']}", self.sc.cases[value(model, self.sc.selector)].label()]
        if cfg["max_num_scheduled_tokens"] is not None:
            knobs.insert(2, f"T={cfg['max_num_scheduled_tokens']}")
        return ", ".join(knobs)


def _input(b: Budgets) -> z3.ArithRef:
    assert b.input is not None, "a policy with an input budget charges it"
    return b.input
