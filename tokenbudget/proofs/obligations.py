"""The obligations the prover decides for each policy, and the order of methods for each."""
from __future__ import annotations

import time
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Optional, Sequence

from ..model import BudgetPolicy
from ..model.replay import replay_on_model
from ..spec.intlike import and_, not_
from ..spec.trace import AddOp, StepOp, Trace, ViolationExpectation
from .bounded_pass import holds_up_to
from .pass_skeleton import PassConfig, PassResult
from .trace_family import Family
from .loop_search import SEARCHED, decide as decide_by_search
from .induction import DECISION_PROPERTIES, LEDGER_INVARIANTS, InductionResult, prove_by_induction
from .trace_search import Found, found_description, search
from .solving import Unknown
from .verdicts import PROVED, PROVED_UP_TO, REFUTED, UNKNOWN, Outcome
from .violations import MODEL_ERROR, VIOLATED

SMALL_SEARCH = 3  # requests searched before the bounded proof
STEP_OBLIGATIONS = LEDGER_INVARIANTS + DECISION_PROPERTIES


@dataclass(frozen=True)
class Options:
    max_requests: int = 8  # N
    timeout_s: float = 60.0  # per z3 query


@dataclass
class Context:
    """One policy under proof; the induction result is shared by its step obligations."""

    policy: BudgetPolicy
    options: Options
    _induction: Optional[InductionResult] = field(default=None, repr=False)
    found: list[Found] = field(default_factory=list, repr=False)  # the searches' counterexamples so far

    @property
    def name(self) -> str:
        return self.policy.name

    def induction(self) -> InductionResult:
        if self._induction is None:
            self._induction = prove_by_induction(self.policy, self.options.timeout_s)
        return self._induction


@dataclass(frozen=True)
class Obligation:
    id: str
    kind: str  # safety | config | efficiency | comparison
    holds_when: str
    decide: Callable[[Context], Outcome]
    applies: Callable[[BudgetPolicy], bool] = lambda policy: True


def refuted(ctx: Context, obligation: str, method: str, start: float, found: Found, why: str) -> Outcome:
    cfg = found.traces[0].config
    knobs = (f"B={cfg['max_num_batched_tokens']}, S={cfg['max_num_seqs']}, k={cfg['num_speculative_tokens']}"
             + (f", {cfg['method']}" if cfg["method"] else "")
             + (f", T={cfg['max_num_scheduled_tokens']}" if cfg["max_num_scheduled_tokens"] is not None else ""))
    detail = f"{knobs}; {found.requests} request(s), {found.steps} step(s)" + (f"; {why}" if why else "")
    return Outcome(ctx.name, obligation, REFUTED, method, time.perf_counter() - start, detail, traces=found.traces)


def unknown(ctx: Context, obligation: str, method: str, start: float, why: str) -> Outcome:
    return Outcome(ctx.name, obligation, UNKNOWN, method, time.perf_counter() - start, why)


def broken(name: str, cfg: PassConfig, r: PassResult) -> Any:
    """Step obligation ``name`` is broken by the pass ``r``: past the loop's assert the model
    runs no more, so a pass that raises shows model-error only."""
    return VIOLATED[name](cfg, r) if name == MODEL_ERROR else and_(not_(r.crashed), VIOLATED[name](cfg, r))


def decide_step(ctx: Context, name: str, fixed: Optional[dict[str, Any]] = None,
                induction: Optional[InductionResult] = None) -> Outcome:
    """A step obligation by induction, then search and the bounded pass (module docstring).
    ``fixed`` pins every config knob and judges that config as if the policy's
    validation were off (for config-complete), with its ``induction`` result."""
    start = time.perf_counter()
    opts, policy = ctx.options, ctx.policy
    check_validation = fixed is None
    try:
        ind = induction or ctx.induction()
    except Unknown as e:
        return unknown(ctx, name, "induction", start, str(e))
    start = time.perf_counter() - ind.seconds  # the shared induction counts for each obligation it decides
    if ind.proved[name]:
        detail = ind.notes.get(name, "inductive (holds at the empty system and after every step of a pass)")
        return Outcome(ctx.name, name, PROVED, "induction", time.perf_counter() - start, detail)
    why = ind.reasons[name]

    def goal(families: Sequence[Family]) -> Any:
        return broken(name, families[0].config, families[0].last)

    what, n = f"{name} of {ctx.name}", opts.max_requests
    common = dict(fixed=fixed, check_validation=check_validation)
    try:
        earlier = None if fixed is not None else shown_by_earlier(ctx, name, min(n, SMALL_SEARCH))
        found = search([policy], goal, name, what, min(n, SMALL_SEARCH), opts.timeout_s, **common,
                       max_size=None if earlier is None else earlier.requests + earlier.steps - 1) or earlier
        if found:
            if fixed is None:
                ctx.found.append(found)
            return refuted(ctx, name, "search", start, found, why)
        if ind.unfollowed and fixed is None and name in SEARCHED:
            return decide_by_search(ctx, name)
        if holds_up_to(policy, lambda st: broken(name, st.config, st.result), n, opts.timeout_s, what,
                       assume_seq_cap=ind.proved["seq-cap"], **common):
            return Outcome(ctx.name, name, PROVED_UP_TO, "bounded", time.perf_counter() - start,
                           f"no pass from a state of at most {n} requests breaks it ({why})", bound=n)
        found = search([policy], goal, name, what, n, opts.timeout_s, min_requests=SMALL_SEARCH + 1, **common)
        if found:
            return refuted(ctx, name, "search", start, found, why)
    except Unknown as e:
        return unknown(ctx, name, "search", start, f"{e} ({why})")
    return unknown(ctx, name, "bounded", start,
                   f"a pass from some state of at most {n} requests breaks it, but no trace of the searched shape "
                   f"from an empty system does ({why})")


def shown_by_earlier(ctx: Context, name: str, max_requests: int) -> Optional[Found]:
    """The smallest counterexample an earlier obligation of the policy found (of at most
    ``max_requests`` requests) whose replay breaks ``name`` too, as a trace that expects
    ``name``: a search then need only look at smaller traces. None when there is none."""
    for earlier in sorted(ctx.found, key=lambda f: (f.requests + f.steps, f.steps)):
        trace = earlier.traces[0]
        if earlier.requests > max_requests or name in {e.violation for e in trace.expect
                                                       if isinstance(e, ViolationExpectation)}:
            continue
        if name not in {v.invariant for v in replay_on_model(trace).violations}:
            continue
        expect = tuple(e for e in trace.expect if not isinstance(e, ViolationExpectation)) + (ViolationExpectation(name),)
        description = found_description(f"{name} of {ctx.name}", earlier.requests, earlier.steps)
        return replace(earlier, traces=(replace(trace, expect=expect, description=description),))
    return None


def as_found(trace: Trace) -> Found:
    """A trace found by other means (a fuzz run, a replay) as an earlier counterexample of its size."""
    ops = trace.ops
    return Found((trace,), sum(isinstance(op, AddOp) for op in ops), sum(isinstance(op, StepOp) for op in ops))


def step_obligations() -> list[Obligation]:
    from ..spec import INVARIANTS

    return [Obligation(name, "safety", INVARIANTS[name].holds_when, lambda ctx, name=name: decide_step(ctx, name))
            for name in STEP_OBLIGATIONS + (MODEL_ERROR,)]
