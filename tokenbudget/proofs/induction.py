"""Unbounded proofs by induction over the ledger points of a pass."""
from __future__ import annotations

import itertools
import time
from dataclasses import dataclass, field, replace
from typing import Callable, Optional

import z3

from ..model import BudgetPolicy, Budgets, decisions
from ..spec import grant_rules
from ..spec.invariants import INVARIANTS, LEDGER
from .solving import check, solver, value
from .violations import MODEL_ERROR
from .symbolic import SymbolicConfig

# The loop variants' structure changes the steps below widen to (``OnePassLoop.structure_changes``):
# a victim rule of any order, a cursor that skips a request after a preemption, a loop that
# does not stop at the exit rule. A cursor moved back (a revisit) is not followed.
_FOLLOWED = frozenset({"victim", "cursor_after_preemption", "running_checks_exit_rule", "waiting_checks_exit_rule"})

LEDGER_INVARIANTS = tuple(inv.id for inv in INVARIANTS.values() if inv.kind == LEDGER)
DECISION_PROPERTIES = tuple(inv.id for inv in INVARIANTS.values() if inv.per_grant)
DECIDED = LEDGER_INVARIANTS + DECISION_PROPERTIES + (MODEL_ERROR,)  # what one induction run decides
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
    ahead: z3.ArithRef  # full takes of the unvisited running requests but the tail
    tail: z3.BoolRef  # the tail of the running queue is still to visit
    kept: z3.ArithRef  # the grants of the pass but the latest
    latest: z3.ArithRef  # the latest grant (0 before the first)
    clean: z3.BoolRef  # every running request visited so far was granted
    full: z3.BoolRef  # every grant in ``kept`` was the request's full take
    latest_full: z3.BoolRef  # so was the latest grant
    tracked: tuple[tuple[z3.ArithRef, ...], ...] = ()  # per tracked part: its live sum per class

    def but(self, **changes: object) -> "Point":
        return replace(self, **changes)


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
    crash: Optional[z3.BoolRef] = None  # the step's loop reaches its assert (``model-error``)


@dataclass
class InductionResult:
    """Which obligations induction proves for one policy, and why not the others."""

    proved: dict[str, bool] = field(default_factory=dict)
    reasons: dict[str, str] = field(default_factory=dict)  # why an obligation is not proved this way
    notes: dict[str, str] = field(default_factory=dict)  # vacuous proofs, said so
    seconds: float = 0.0
    unfollowed: tuple[str, ...] = ()  # the loop's structure changes induction does not follow (then it tried nothing)


def prove_by_induction(policy: BudgetPolicy, timeout_s: float, fixed: Optional[dict] = None,
                       check_validation: bool = True) -> InductionResult:
    """Houdini, then the decision properties, for ``max_num_scheduled_tokens`` unset and
    set; an obligation is proved when it holds in both. ``fixed`` pins config knobs;
    ``check_validation`` False drops the policy's requirements (for config-complete).
    Raises Unknown on a z3 timeout."""
    start = time.perf_counter()
    out = InductionResult()
    changes = unfollowed(policy)
    if changes:  # a refund that leaves its grant scheduled is outside the ledger abstraction
        why = f"its loop changes the pass's structure ({', '.join(changes)}), which induction does not follow"
        out.reasons = {name: why for name in DECIDED}
        out.proved = {name: False for name in out.reasons}
        out.unfollowed = tuple(changes)
        return out
    for scheduled_set in (False, True):
        run = _Houdini(policy, SymbolicConfig(policy, scheduled_set, fixed=fixed), timeout_s, check_validation)
        run.solve()
        for name, why in run.failed.items():
            out.reasons.setdefault(name, why)
        out.notes.update(run.notes)
    for name in DECIDED:
        out.proved[name] = name not in out.reasons
    out.seconds = time.perf_counter() - start
    return out


def unfollowed(policy: BudgetPolicy) -> list[str]:
    """The structure changes of the policy's loop that induction does not follow (then it tries nothing)."""
    return [c for c in policy.loop.structure_changes() if c not in _FOLLOWED]


class _Houdini:
    def __init__(self, policy: BudgetPolicy, sc: SymbolicConfig, timeout_s: float, check_validation: bool) -> None:
        self.policy, self.sc, self.p, self.timeout_s = policy, sc, sc.params, timeout_s
        self.config = [sc.domain, sc.accepts] if check_validation else [sc.domain]
        self._names = itertools.count()  # per proof, so that a proof's queries (and times) repeat exactly
        self.notes: dict[str, str] = {}
        self.failed: dict[str, str] = {}
        self.dropped: dict[str, str] = {}  # candidate -> the step that broke it
        self.has_input = policy.initial_budgets(self.p, z3.Int("probe_d0")).input is not None
        self.loop = policy.loop
        changes = set(self.loop.structure_changes())
        # any running request may be a victim (the shared rule: only under priority scheduling)
        self.any_victim = z3.Or(self.p.priority_scheduling, z3.BoolVal("victim" in changes))
        self.cursor_skips = "cursor_after_preemption" in changes
        self.max_decode_grant = 1 + (self.p.num_speculative_tokens if self.loop.drafts_in_grant else 0)
        self.sums = self._affine_sums()
        self.lemmas = self._tracked_lemmas()
        self.candidates = self._candidates()
        self.alive = set(self.candidates)
        self.next_take_bounded = self._next_take_bounded()

    # -- the abstraction ---------------------------------------------------------------
    def _affine_sums(self) -> dict[str, Callable[[Point], z3.ArithRef]]:
        """Live charge and rows as functions of a point: from ``n`` and ``g`` where the part is
        affine in the grant in both classes, else the point's tracked sum (``self.tracked``)."""
        policy, p = self.policy, self.p
        parts: dict[str, Callable[[z3.ArithRef, bool], z3.ArithRef]] = {
            "charge.token": lambda g, dec: policy.charge(p, g, dec).token,
            "runner rows": lambda g, dec: self.sc.need.runner_rows(g, dec),  # physical: the method table's
        }
        if self.has_input:
            parts["charge.input"] = lambda g, dec: _input(policy.charge(p, g, dec))
        g = z3.Int("affine_g")
        self.tracked: list[tuple[str, Callable[[z3.ArithRef, bool], z3.ArithRef]]] = []
        self.per_class: dict[str, Callable[[Point, int], z3.ArithRef]] = {}
        for name, fn in parts.items():
            affine = True
            for cls in (PREFILL, DECODE):
                zero, one = fn(z3.IntVal(0), cls), fn(z3.IntVal(1), cls)
                s = solver(self.timeout_s, *self.config, g >= 0, fn(g, cls) != zero + g * (one - zero))
                affine = affine and not check(s, f"{self.policy.name}: is {name} affine")
            if affine:
                self.per_class[name] = _affine_sum(fn)
            else:
                self.per_class[name] = _tracked_sum(len(self.tracked))
                self.tracked.append((name, fn))
        self.parts = parts
        return {name: _total(at) for name, at in self.per_class.items()}

    def _tracked_lemmas(self) -> list[tuple[str, str]]:
        """The per-request facts ``lhs(grant) >= rhs(grant)`` (in both classes) that involve a
        tracked part and hold for every grant: summed over any set of live grants they still
        hold, so they are facts of every point (the token charges cover the grants, the input
        charges cover the runner rows)."""
        pairs = [("charge.token", "grants")] + ([("charge.input", "runner rows")] if self.has_input else [])
        tracked = {name for name, _ in self.tracked}
        grant = z3.Int("lemma_grant")
        out = []
        for lhs, rhs in pairs:
            if not {lhs, rhs} & tracked:
                continue
            holds = True
            for cls in (PREFILL, DECODE):
                left, right = (grant if side == "grants" else self.parts[side](grant, cls) for side in (lhs, rhs))
                bound = [grant <= self.max_decode_grant] if cls else []
                s = solver(self.timeout_s, *self.config, grant >= 1, *bound, left < right)
                holds = holds and not check(s, f"{self.policy.name}: does {lhs} cover {rhs}")
            if holds:
                out.append((lhs, rhs))
        return out

    def _tracked_facts(self, pt: Point) -> list[z3.BoolRef]:
        """What every point's tracked sums satisfy: none without a live grant, the lemmas."""
        facts = [z3.Implies(pt.n[c] == 0, sums[c] == 0) for sums in pt.tracked for c in (0, 1)]
        for lhs, rhs in self.lemmas:
            for c in (0, 1):
                right = pt.g[c] if rhs == "grants" else self.per_class[rhs](pt, c)
                facts.append(self.per_class[lhs](pt, c) >= right)
        return facts

    def _candidates(self) -> dict[str, Callable[[Point], z3.BoolRef]]:
        p, policy, sums = self.p, self.policy, self.sums

        def identity(pt: Point) -> z3.BoolRef:
            initial = policy.initial_budgets(p, pt.d0)
            same = [pt.budgets.token == initial.token - sums["charge.token"](pt)]
            if self.has_input:
                same.append(pt.budgets.input == initial.input - sums["charge.input"](pt))
            return z3.And(same)

        def within(pt: Point) -> z3.BoolRef:
            initial = policy.initial_budgets(p, pt.d0)
            kept = [pt.budgets.token <= initial.token - sums["charge.token"](pt)]
            if self.has_input:
                kept.append(pt.budgets.input <= initial.input - sums["charge.input"](pt))
            return z3.And(kept)

        out: dict[str, Callable[[Point], z3.BoolRef]] = {
            "seq-cap": lambda pt: pt.run <= p.max_num_seqs,
            "token-cap": lambda pt: pt.g[0] + pt.g[1] <= policy.token_cap(p),
            "input-rows-cap": lambda pt: sums["runner rows"](pt) <= p.max_num_batched_tokens,
            "exact-refund": identity,  # budgets = initial - the live charges
            # the strengthening that survives a refund giving back less than was charged
            "budgets: at most initial - the live charges": within,
            "token-budget-nonnegative": lambda pt: pt.budgets.token >= 0,
            "decodes-at-start-within-S": lambda pt: pt.d0 <= p.max_num_seqs,
            "queue: only the tail can find the budget short":
                lambda pt: pt.budgets.token >= pt.ahead + z3.If(pt.tail, 1, 0),
            "queue: the grants but the latest leave a token":
                lambda pt: pt.kept <= policy.initial_budgets(p, pt.d0).token - 1,
            "queue: kept and latest are the live grants": lambda pt: pt.kept + pt.latest == pt.g[0] + pt.g[1],
            "queue: no running request is skipped": lambda pt: pt.clean,
            "queue: the grants but the latest were full": lambda pt: pt.full,
            "queue: a short latest grant exhausted the budget":
                lambda pt: z3.Or(pt.latest_full, z3.Not(policy.may_schedule(p, pt.budgets))),
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
        ints = z3.Ints(" ".join(f"{name}_{i}" for name in ("run", "d0", "visited", "n0", "n1", "g0", "g1", "ahead",
                                                             "kept", "latest")))
        token = z3.Int(f"token_{i}")
        inp = z3.Int(f"input_{i}") if self.has_input else None
        tracked = tuple((z3.Int(f"tracked{t}_0_{i}"), z3.Int(f"tracked{t}_1_{i}")) for t in range(len(self.tracked)))
        return Point(ints[0], ints[1], ints[2], (ints[3], ints[4]), (ints[5], ints[6]), Budgets(token, inp),
                     ints[7], z3.Bool(f"tail_{i}"), ints[8], ints[9], z3.Bool(f"clean_{i}"), z3.Bool(f"full_{i}"),
                     z3.Bool(f"latest_full_{i}"), tracked)

    def _structure(self, pt: Point) -> z3.BoolRef:
        """Facts of every ledger point by construction: every grant is >= 1 token, a decode's
        at most 1 + its drafts, scheduled requests are running, decodes granted were
        decoding at the start of the pass."""
        return z3.And(pt.n[0] >= 0, pt.n[1] >= 0, pt.g[0] >= pt.n[0], pt.g[1] >= pt.n[1], pt.d0 >= 0,
                      pt.g[1] <= pt.n[1] * self.max_decode_grant, z3.Implies(pt.n[0] == 0, pt.g[0] == 0),
                      pt.n[1] <= pt.visited, pt.visited <= pt.d0, pt.n[0] + pt.n[1] <= pt.run,
                      pt.ahead >= 0, pt.kept >= 0, pt.latest >= 0,
                      *self._tracked_facts(pt))

    # -- steps -------------------------------------------------------------------------
    def _steps(self, pre: Point) -> list[Step]:
        visits = [self._visit(pre, cls, at_tail, granted)
                  for cls in (PREFILL, DECODE) for at_tail in (False, True) for granted in (True, False)]
        return [*visits, self._admission(pre), self._refund(pre, PREFILL), self._refund(pre, DECODE),
                self._preempt_unscheduled(pre), self._next_pass(pre)]

    def _visit(self, pre: Point, cls: bool, at_tail: bool, granted: bool) -> Step:
        """The running loop visits a request of class ``cls`` (the tail of the queue or one
        ahead of it) and grants it, or skips it (exit rule, or nothing to grant)."""
        policy, p = self.policy, self.p
        demand, computed = z3.Int(self._name("demand")), z3.Int(self._name("computed"))
        threshold = z3.If(z3.Bool(self._name("threshold")), self.sc.long_prefill_token_threshold, 0)
        drafts = z3.Int(self._name("drafts"))  # proposed: k for a decode, 0 for a prefill chunk
        num_tokens = computed + (1 if cls else demand)
        facts = [demand >= 1, computed >= 0, num_tokens <= p.max_model_len - 1, pre.run - pre.n[0] - pre.n[1] >= 1]
        if cls:  # a decode: only its last sampled token and its drafts are left
            facts += [drafts == p.num_speculative_tokens, pre.visited < pre.d0,
                      demand == 1 + (drafts if self.loop.drafts_in_grant else 0)]
        else:
            facts.append(drafts == 0)
        bypass = self.loop.decodes_bypass_budget and cls
        grant = self.loop.running_grant(policy, p, pre.budgets, demand, computed, threshold, p.max_model_len, bypass)
        take = self._take(demand, computed, threshold, bypass)
        facts += [pre.tail, pre.ahead == 0] if at_tail else [take >= 1, take <= pre.ahead]
        moved = pre.but(ahead=pre.ahead - (0 if at_tail else take), tail=z3.BoolVal(False) if at_tail else pre.tail,
                        visited=pre.visited + (1 if cls else 0))
        where = f"{'the tail' if at_tail else 'a request ahead of the tail'} ({'decode' if cls else 'prefill chunk'})"
        checks = self.loop.running_checks_exit_rule and not bypass
        may = policy.may_schedule(p, pre.budgets) if checks else True
        if not granted:
            skipped = z3.Or(z3.Not(may), grant <= 0, z3.BoolVal(self.cursor_skips))
            guard = z3.And(*facts, skipped)
            return Step(f"the running loop skipping {where}", guard, moved.but(clean=z3.BoolVal(False)))
        post = self._granted(moved, cls, grant, grant == take)
        record = Decision(grant, computed,
                          decisions.scheduled_drafts(self.loop.drafts_in_grant, drafts, computed, grant, num_tokens,
                                                     cls),
                          z3.BoolVal(False), z3.And(not cls, computed < num_tokens - 1))
        return Step(f"a running-loop grant to {where}", z3.And(*facts, grant > 0, may), post, record)

    def _take(self, demand: z3.ArithRef, computed: z3.ArithRef, threshold: z3.ArithRef, bypass: bool) -> z3.ArithRef:
        """The full take: ``running_grant`` with budgets larger than the demand."""
        p = self.p
        ample = demand + p.draft_slots + 1
        return self.loop.running_grant(self.policy, p, Budgets(ample, ample), demand, computed, threshold,
                                       p.max_model_len, bypass)

    def _admission(self, pre: Point) -> Step:
        policy, p = self.policy, self.p
        demand, hits = z3.Int(self._name("demand")), z3.Int(self._name("hits"))
        threshold = z3.If(z3.Bool(self._name("threshold")), self.sc.long_prefill_token_threshold, 0)
        prefill_scheduled, running_scheduled = (z3.Bool(self._name("prefill_scheduled")),
                                                 z3.Bool(self._name("running_scheduled")))
        decision = self.loop.admission(policy, p, pre.budgets, demand, hits, threshold, p.max_model_len,
                                       p.num_speculative_tokens, prefill_scheduled, running_scheduled,
                                       p.enable_chunked_prefill)
        attempt = z3.And(demand >= 1, hits >= 0, hits + demand <= p.max_model_len - 1, pre.ahead == 0,
                         z3.Not(pre.tail),
                         policy.may_schedule(p, pre.budgets) if self.loop.waiting_checks_exit_rule else True,
                         pre.run < p.max_num_seqs, z3.Not(decision.stop))
        ample = demand + p.draft_slots + p.num_speculative_tokens + 1
        full = self.loop.admission(policy, p, Budgets(ample, ample), demand, hits, threshold, p.max_model_len,
                                   p.num_speculative_tokens, prefill_scheduled, running_scheduled,
                                   p.enable_chunked_prefill)
        post = self._granted(pre.but(run=pre.run + 1), PREFILL, decision.grant, decision.grant == full.grant)
        record = Decision(decision.grant, hits, z3.If(decision.padded, p.num_speculative_tokens, 0),
                          decision.padded, hits < hits + demand - 1)
        return Step("an admission", z3.And(attempt, decision.grant > 0), post, record,
                    crash=z3.And(attempt, decision.grant <= 0))

    def _granted(self, pre: Point, cls: bool, grant: z3.ArithRef, full: z3.BoolRef) -> Point:
        charged = self.policy.spend(pre.budgets, self.policy.charge(self.p, grant, cls), -1)
        n, g = list(pre.n), list(pre.g)
        n[cls] = n[cls] + 1
        g[cls] = g[cls] + grant
        return pre.but(n=(n[0], n[1]), g=(g[0], g[1]), budgets=charged, kept=pre.kept + pre.latest, latest=grant,
                       full=z3.And(pre.full, pre.latest_full), latest_full=full,
                       tracked=self._track(pre, cls, grant, +1))

    def _track(self, pre: Point, cls: bool, grant: z3.ArithRef, sign: int) -> tuple[tuple[z3.ArithRef, ...], ...]:
        """The tracked sums after a grant (sign +1) or the refund (-1) of ``grant`` in class ``cls``."""
        out = []
        for (_, fn), sums in zip(self.tracked, pre.tracked):
            pair = list(sums)
            pair[cls] = pair[cls] + sign * fn(grant, cls)
            out.append((pair[0], pair[1]))
        return tuple(out)

    def _havoc_queue(self, pt: Point) -> tuple[Point, z3.BoolRef]:
        """A point whose queue fields are anything (after a refund the queue order of the
        live grants is not followed), and what they still satisfy."""
        i = next(self._names)
        out = pt.but(ahead=z3.Int(f"ahead_h{i}"), tail=z3.Bool(f"tail_h{i}"), kept=z3.Int(f"kept_h{i}"),
                     latest=z3.Int(f"latest_h{i}"), clean=z3.BoolVal(False), full=z3.BoolVal(False))
        return out, z3.And(out.ahead >= 0, out.kept >= 0, out.latest >= 0)

    def _refund(self, pre: Point, cls: bool) -> Step:
        grant = z3.Int(self._name("refunded"))
        rest = pre.n[cls] - 1
        havoc, sane = self._havoc_queue(pre)
        # the victim's grant is refunded because another running request, not scheduled yet,
        # needs its blocks
        guard = z3.And(self.any_victim, pre.run - pre.n[0] - pre.n[1] >= 1,
                       rest >= 0, grant >= 1, pre.g[cls] - grant >= rest, sane,
                       z3.Implies(rest == 0, pre.g[cls] == grant),
                       *((grant <= self.max_decode_grant, pre.g[cls] - grant <= rest * self.max_decode_grant)
                         if cls else ()))
        budgets = self.policy.spend(pre.budgets, self.policy.refund(self.p, grant, cls), +1)
        n, g = list(pre.n), list(pre.g)
        n[cls] = n[cls] - 1
        g[cls] = g[cls] - grant
        post = havoc.but(run=pre.run - 1, n=(n[0], n[1]), g=(g[0], g[1]), budgets=budgets,
                         tracked=self._track(pre, cls, grant, -1))
        # the grants left hold the per-request facts of the tracked sums, as every set of grants does
        guard = z3.And(guard, *self._tracked_facts(post))
        return Step(f"a same-step refund of a {'decode' if cls else 'prefill chunk'}", guard, post)

    def _preempt_unscheduled(self, pre: Point) -> Step:
        """An unscheduled running request is preempted. Under FCFS it is the tail (popped
        while a request ahead of it needs blocks), so the queue only loses takes."""
        havoc, sane = self._havoc_queue(pre)
        post = havoc.but(run=pre.run - 1, clean=pre.clean, kept=pre.kept, latest=pre.latest, full=pre.full)
        fcfs = z3.And(post.ahead <= pre.ahead, z3.Implies(post.tail, pre.tail))
        guard = z3.And(pre.run - pre.n[0] - pre.n[1] >= 1, sane, z3.Or(self.any_victim, fcfs))
        return Step("a preemption of an unscheduled request", guard, post)

    def _next_pass(self, pre: Point) -> Step:
        """Finishes and aborts, then the next pass. A running loop ends when it has visited
        the whole queue (a preemption pops the requests behind the one preempting), or
        when the exit rule breaks it (not where decodes bypass the budget: FastDeploy skips
        instead). When it visited every running request, granting each, the requests ahead
        of the next tail were granted in full (only the tail could find the budget short),
        so they take at most ``kept``."""
        start = self._start()
        visited_all = z3.And(pre.ahead == 0, z3.Not(pre.tail))
        broke = z3.BoolVal(False) if self.loop.decodes_bypass_budget else z3.Not(
            self.policy.may_schedule(self.p, pre.budgets))
        ended = z3.Or(visited_all, broke, self.any_victim)  # a victim of any order may end it anywhere
        in_full = z3.And(visited_all, pre.clean, pre.full, self.next_take_bounded)
        guard = z3.And(ended, 0 <= start.d0, start.d0 <= start.run, start.run <= pre.run,
                       start.tail == (start.run >= 1), start.ahead >= 0, z3.Implies(start.run <= 1, start.ahead == 0),
                       z3.Implies(in_full, start.ahead <= pre.kept))
        return Step("the start of the next pass", guard, start)

    def _start(self) -> Point:
        """A point at the start of a pass: nothing granted, the policy's initial budgets."""
        i = next(self._names)
        run, d0, ahead = z3.Int(f"run_s{i}"), z3.Int(f"d0_s{i}"), z3.Int(f"ahead_s{i}")
        zero = z3.IntVal(0)
        return Point(run, d0, zero, (zero, zero), (zero, zero), self.policy.initial_budgets(self.p, d0),
                     ahead, z3.Bool(f"tail_s{i}"), zero, zero, z3.BoolVal(True), z3.BoolVal(True), z3.BoolVal(True),
                     tuple((zero, zero) for _ in self.tracked))

    def _next_take_bounded(self) -> bool:
        """A request granted its full take, by the running loop or by an admission, never
        takes more in the next pass, whatever drafts are accepted (the next pass's
        threshold applies: another request runs)."""
        policy, p, k = self.policy, self.p, self.p.num_speculative_tokens
        budget = z3.Int(self._name("budget"))
        budgets = Budgets(budget, budget if self.has_input else None)
        cases = []
        for cls in (PREFILL, DECODE):
            demand, computed = z3.Int(self._name("demand")), z3.Int(self._name("computed"))
            threshold = z3.If(z3.Bool(self._name("threshold")), self.sc.long_prefill_token_threshold, 0)
            num_tokens = computed + (1 if cls else demand)
            bypass = self.loop.decodes_bypass_budget and cls
            grant = self.loop.running_grant(policy, p, budgets, demand, computed, threshold, p.max_model_len, bypass)
            drafts = decisions.scheduled_drafts(self.loop.drafts_in_grant, k if cls else 0, computed, grant,
                                                num_tokens, cls)
            facts = [demand >= 1, computed >= 0, num_tokens <= p.max_model_len - 1,
                     *([demand == 1 + (k if self.loop.drafts_in_grant else 0)] if cls else []),
                     grant > 0, grant == self._take(demand, computed, threshold, bypass)]
            cases.append((facts, computed, grant, num_tokens, drafts, z3.BoolVal(False)))
        demand, hits = z3.Int(self._name("demand")), z3.Int(self._name("hits"))
        threshold = z3.If(z3.Bool(self._name("threshold")), self.sc.long_prefill_token_threshold, 0)
        flags = (z3.Bool(self._name("prefill_scheduled")), z3.Bool(self._name("running_scheduled")))
        decision = self.loop.admission(policy, p, budgets, demand, hits, threshold, p.max_model_len, k, *flags,
                                       p.enable_chunked_prefill)
        ample = demand + p.draft_slots + k + 1
        full = self.loop.admission(policy, p, Budgets(ample, ample), demand, hits, threshold, p.max_model_len, k,
                                   *flags, p.enable_chunked_prefill)
        facts = [demand >= 1, hits >= 0, hits + demand <= p.max_model_len - 1, z3.Not(decision.stop),
                 decision.grant > 0, decision.grant == full.grant]
        cases.append((facts, hits, decision.grant, hits + demand, z3.If(decision.padded, k, 0), decision.padded))
        for facts, computed, grant, num_tokens, drafts, padded in cases:
            taken = z3.Int(self._name("taken"))
            after = computed + grant
            emitted = num_tokens + 1 + taken  # the sampled token and the accepted drafts
            done = after >= num_tokens
            next_demand = z3.If(done, 1 + (k if self.loop.drafts_in_grant else 0), num_tokens - after)
            next_computed = z3.If(done, decisions.computed_after_output(self.loop.drafts_in_grant, after, computed,
                                                                        grant, num_tokens, taken), after)
            threshold = self.sc.long_prefill_token_threshold
            next_take = z3.If(done, self._take(next_demand, next_computed, threshold, self.loop.decodes_bypass_budget),
                              self._take(next_demand, next_computed, threshold, False))
            s = solver(self.timeout_s, *self.config, *facts, taken >= 0, taken <= z3.If(padded, 0, drafts),
                       z3.Implies(done, emitted <= p.max_model_len - 1), next_take > grant)
            if check(s, f"{self.policy.name}: the next take of a request granted in full"):
                return False
        return True

    # -- the fixpoint, then the decision properties ----------------------------------------
    def solve(self) -> None:
        empty = self._start()
        self._prune(Step("the empty system", z3.And(empty.run == 0, empty.d0 == 0, empty.ahead == 0,
                                                    z3.Not(empty.tail)), empty), None, {})
        pre = self._point()
        at_pre = {c: _term(self.candidates[c](pre)) for c in self.candidates}
        steps = self._steps(pre)
        changed = True
        while changed:
            changed = False
            for step in steps:
                changed |= self._prune(step, pre, at_pre)
        for name in LEDGER_INVARIANTS:
            if name in self.candidates and name not in self.alive:
                self.failed[name] = self.dropped[name]
        context = [*self.config, self._structure(pre), *(at_pre[c] for c in self.alive)]
        for step in steps:
            if step.decision is not None:
                self._decision_properties(step, context)
            if step.crash is not None and MODEL_ERROR not in self.failed:
                s = solver(self.timeout_s, *context, step.crash)
                if check(s, f"{self.policy.name}: {MODEL_ERROR} of {step.name}"):
                    self.failed[MODEL_ERROR] = (f"{step.name} can come to a grant <= 0, which the loop asserts "
                                                f"against ({self._describe(s.model())})")

    def _prune(self, step: Step, pre: Optional[Point], at_pre: dict[str, z3.BoolRef]) -> bool:
        """Drop the candidates that the step can break from a point where all surviving ones
        hold (``at_pre``: the candidates at ``pre``); True when some were dropped."""
        dropped = False
        at_post = {c: _term(self.candidates[c](step.post)) for c in self.alive}
        structure = self._structure(step.post)
        while self.alive:
            assumptions = [*self.config, step.guard]
            if pre is not None:
                assumptions += [self._structure(pre), *(at_pre[c] for c in self.alive)]
            goals = {c: at_post[c] for c in self.alive}
            s = solver(self.timeout_s, *assumptions, z3.Not(z3.And(structure, *goals.values())))
            if not check(s, f"{self.policy.name}: {step.name}"):
                return dropped
            model = s.model()
            if not z3.is_true(model.eval(structure, model_completion=True)):
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
            "model-len": grant_rules.fits_model_len(d.computed, d.grant, p.max_model_len),
            "spec-shape": grant_rules.spec_shape(d.grant, d.drafts, d.padded, d.prefill, k),
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


def _affine_sum(fn: Callable[[z3.ArithRef, bool], z3.ArithRef]) -> Callable[[Point, int], z3.ArithRef]:
    """The live sum of a part affine in the grant in class c: ``n * f(0) + G * (f(1) - f(0))``."""
    def at(pt: Point, c: int) -> z3.ArithRef:
        return pt.n[c] * fn(z3.IntVal(0), bool(c)) + pt.g[c] * (fn(z3.IntVal(1), bool(c)) - fn(z3.IntVal(0), bool(c)))
    return at


def _tracked_sum(index: int) -> Callable[[Point, int], z3.ArithRef]:
    """The live sum of the ``index``-th tracked part in class c."""
    def at(pt: Point, c: int) -> z3.ArithRef:
        return pt.tracked[index][c]
    return at


def _total(at: Callable[[Point, int], z3.ArithRef]) -> Callable[[Point], z3.ArithRef]:
    """A per-class sum over both classes."""
    return lambda pt: z3.Sum([at(pt, c) for c in (0, 1)])


def _term(holds: object) -> z3.BoolRef:
    """A candidate as a z3 Bool: on a fully fixed config one can fold to a Python bool."""
    return z3.BoolVal(holds) if isinstance(holds, bool) else holds  # type: ignore[return-value]


def _input(b: Budgets) -> z3.ArithRef:
    assert b.input is not None, "a policy with an input budget charges it"
    return b.input
