"""Config obligations over symbolic configs: does validation accept exactly what can be served?"""
from __future__ import annotations

import time
from dataclasses import fields, replace
from typing import Any, Callable, Optional, Sequence

import z3

from ..model import BudgetConfig, ConfigError
from ..model.replay import ReplayResult, replay_on_model
from ..spec import ConfigProbe
from ..spec.intlike import or_
from ..spec.invariants import config_complete as spec_config_complete
from ..spec.invariants import config_sound as spec_config_sound
from ..spec.trace import ConfigRejectedExpectation, Trace
from .trace_family import Family
from .induction import prove_by_induction
from .bounded_pass import holds_up_to
from .obligations import STEP_OBLIGATIONS, Context, Obligation, broken, decide_step, refuted, unknown
from .violations import MODEL_ERROR
from .trace_search import FOUND_BY, ProverBug, bypassed, search
from .solving import Unknown, check, minimise, solver
from .verdicts import PROVED, PROVED_UP_TO, REFUTED, Outcome

MAX_CANDIDATES = 6


def _first_step(fam: Family) -> tuple[z3.BoolRef, Any]:
    """(one request is present, what the first step grants) of a one-request family."""
    return fam.requests[0].present, fam.last.total(fam.last.grant)


def config_sound(ctx: Context) -> Outcome:
    start = time.perf_counter()
    policy = ctx.policy

    def goal(families: Sequence[Family]) -> Any:
        present, granted = _first_step(families[0])
        return z3.And(present, granted == 0)

    def judge(traces: Sequence[Trace], results: Sequence[ReplayResult]) -> Optional[str]:
        probe = ConfigProbe(accepted=True, first_step_grants=results[0].steps[0].tokens)
        return None if spec_config_sound(probe) else "spec.config_sound does not flag the probe"

    try:
        found = search([policy], goal, "progress", f"config-sound of {ctx.name}", 1, ctx.options.timeout_s,
                       judge=judge, max_steps=1)
    except Unknown as e:
        return unknown(ctx, "config-sound", "config", start, str(e))
    if found:
        return refuted(ctx, "config-sound", "config", start, found, "an accepted config cannot schedule this request")
    return Outcome(ctx.name, "config-sound", PROVED, "config", time.perf_counter() - start,
                   "every accepted config schedules a token for any one request in an empty system")


def config_complete(ctx: Context) -> Outcome:
    start = time.perf_counter()
    excluded: list[str] = []  # why each candidate is rightly refused
    blocks: list[Callable[[Family], z3.BoolRef]] = []  # not a candidate judged so far (or one near it)
    try:
        for i in range(2 * MAX_CANDIDATES):
            candidate = _refused_candidate(ctx, blocks)
            if candidate is None:
                return Outcome(ctx.name, "config-complete", PROVED, "config", time.perf_counter() - start,
                               "every refused config is unsafe or cannot schedule a token")
            trace, cfg = candidate
            safe, why = _judged(ctx, cfg)
            if safe:
                grants = _verify_over_rejection(ctx, trace)
                return Outcome(ctx.name, "config-complete", REFUTED, "config", time.perf_counter() - start,
                               f"refused ({trace.expect[0].config_rejected}) but the probe grants {grants} token(s) "
                               f"and {why}", traces=(trace,))
            excluded.append(why)
            blocks.append(lambda fam, cfg=cfg, further=i + 1 >= MAX_CANDIDATES: z3.Not(
                fam.sc.max_num_batched_tokens <= 2 * cfg["max_num_batched_tokens"] if further else _pinned(fam, cfg)))
    except Unknown as e:
        return unknown(ctx, "config-complete", "config", start, str(e))
    return unknown(ctx, "config-complete", "config", start,
                   f"no over-rejection among {len(excluded)} refused configs, each unsafe: " + "; ".join(excluded))


def _refused_candidate(ctx: Context, blocks: Sequence[Callable[[Family], z3.BoolRef]]
                       ) -> Optional[tuple[Trace, dict[str, Any]]]:
    """The smallest refused config that ``blocks`` (Family -> z3 Bool) allow whose first step
    grants a token, as a probe trace expecting the refusal; None when there is none."""
    for scheduled_set in (False, True):
        fam = Family(ctx.policy, 1, 1, scheduled_set, check_validation=False)
        present, granted = _first_step(fam)
        constraints = [*fam.constraints, fam.sc.in_scope, z3.Not(fam.sc.accepts), present, granted > 0,
                       *(block(fam) for block in blocks)]
        found = solver(ctx.options.timeout_s, *constraints)
        if not check(found, f"config-complete of {ctx.name}"):
            continue
        model = minimise(constraints, fam.objectives(), ctx.options.timeout_s, f"config-complete of {ctx.name}",
                         start=found.model())
        message = fam.sc.requirement_failed(model)
        assert message is not None, "a refused config is refused by validation"
        probe = fam.trace(model, None, f"config-complete of {ctx.name}: a refused config that serves safely",
                          FOUND_BY)
        trace = replace(probe, expect=(ConfigRejectedExpectation(message),))
        return trace, dict(probe.config)
    return None


def _pinned(fam: Family, cfg: dict[str, Any]) -> z3.BoolRef:
    """The family's config is exactly ``cfg``."""
    sc = fam.sc
    same = [sc.selector == next(i for i, c in enumerate(sc.cases)
                                if (c.method, c.parallel_drafting, c.scheduling_policy) ==
                                (cfg["method"], cfg["parallel_drafting"], cfg["scheduling_policy"]))]
    for name, term in sc.knobs.items():
        if isinstance(term, z3.ExprRef):
            same.append(term == cfg[name])
    return z3.And(same)


def _judged(ctx: Context, cfg: dict[str, Any]) -> tuple[bool, str]:
    """Whether the policy serves ``cfg`` safely with its validation off, and why: the first
    step obligation refuted (or undecided) there, else how each was proved."""
    fixed = {f.name: cfg[f.name] for f in fields(BudgetConfig)}
    induction = prove_by_induction(ctx.policy, ctx.options.timeout_s, fixed=fixed, check_validation=False)
    n, steps = ctx.options.max_requests, STEP_OBLIGATIONS + (MODEL_ERROR,)
    if induction.unfollowed and holds_up_to(  # one bounded pass for them all, where induction decides none
            ctx.policy, lambda st: or_(*(broken(name, st.config, st.result) for name in steps)), n,
            ctx.options.timeout_s, f"the step obligations of {ctx.name}", assume_seq_cap=False, fixed=fixed,
            check_validation=False):
        return True, f"every step obligation holds there (up to {n} requests)"
    bounded = []
    for name in steps:
        outcome = decide_step(ctx, name, fixed=fixed, induction=induction)
        if outcome.verdict not in (PROVED, PROVED_UP_TO):
            return False, (f"{name} {outcome.label} at B={cfg['max_num_batched_tokens']}, S={cfg['max_num_seqs']}, "
                           f"k={cfg['num_speculative_tokens']}")
        if outcome.verdict == PROVED_UP_TO:
            bounded.append(f"{name} up to {outcome.bound} requests")
    return True, "every step obligation holds there" + (f" ({', '.join(bounded)})" if bounded else "")


def _verify_over_rejection(ctx: Context, trace: Trace) -> int:
    """Replay the probe: refused as expected, and served without a violation when the
    policy's validation is off; ``spec.invariants.config_complete`` must flag it. Returns what its
    first step grants."""
    refused = replay_on_model(trace)
    if not refused.ok:
        raise ProverBug(f"{ctx.name}: the refused config replays otherwise: {'; '.join(refused.problems)}")
    served = replay_on_model(replace(trace, expect=()), bypassed(ctx.policy))
    probe = ConfigProbe(accepted=False, first_step_grants=served.steps[0].tokens,
                        safety_violations=tuple(sorted({v.invariant for v in served.violations})))
    if not spec_config_complete(probe):
        raise ProverBug(f"{ctx.name}: spec.config_complete does not flag the over-rejection ({probe})")
    try:
        ctx.policy.validate(BudgetConfig(**trace.config))
    except ConfigError:
        return probe.first_step_grants
    raise ProverBug(f"{ctx.name}: the candidate config is accepted")


def config_obligations() -> list[Obligation]:
    from ..spec import INVARIANTS

    return [Obligation("config-sound", "config", INVARIANTS["config-sound"].holds_when, config_sound),
            Obligation("config-complete", "config", INVARIANTS["config-complete"].holds_when, config_complete)]
