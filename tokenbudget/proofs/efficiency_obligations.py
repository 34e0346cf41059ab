"""Efficiency obligations: budget left unused, and vllm-adaptive against vllm-static."""
from __future__ import annotations

import time
from dataclasses import replace
from typing import Any, Callable, Optional, Sequence

import z3

from ..model import BudgetPolicy, decisions, get_policy
from ..spec.intlike import BoolLike, IntLike, and_, cdiv, ite, not_
from ..model.replay import ReplayResult, replay_on_model
from ..spec.trace import Trace
from .bounded_pass import AbstractState, holds_up_to
from .trace_family import FAMILY_STEPS, Family
from .obligations import SMALL_SEARCH, Context, Obligation, refuted, unknown
from .pass_skeleton import PassConfig, PassResult, Slot
from .trace_search import search
from .solving import Unknown
from .verdicts import PROVED_UP_TO, Outcome
from .violations import VIOLATED, work_gap

BASELINE = "vllm-static"
AMPLE_KV_COMPARISON_REQUESTS = 4  # 2 s a comparison; 8 requests take 40-50 s (none found either)
USER_CAPS_OFF = {"long_prefill_token_threshold": 0, "enable_chunked_prefill": True}  # and T unset
CHALLENGER = "vllm-adaptive"


def unserved(cfg: PassConfig, slots: Sequence[Slot], r: PassResult) -> IntLike:
    """``decisions.unserved_demand`` after the pass, as the loop's StepRecord reports it."""
    waiting = [and_(s.present, not_(run)) for s, run in zip(slots, r.running_after)]
    drafts = [ite(sched, 0, s.drafts) for s, sched in zip(slots, r.scheduled)]
    computed = [ite(sched, before + grant, s.computed)
                for s, sched, grant, before in zip(slots, r.scheduled, r.grant, r.computed_before)]
    return decisions.unserved_demand(cfg.params.max_num_seqs, r.running_after, waiting,
                                     [s.num_tokens for s in slots], drafts, computed)


def _clean(families: Sequence[Family]) -> list[BoolLike]:
    """Every step of every family grants a token and violates no step invariant."""
    out: list[BoolLike] = []
    for fam in families:
        for r in fam.passes:
            out.append(r.total(r.grant) > 0)
            out += [not_(violated(fam.config, r)) for violated in VIOLATED.values()]
    return out


def work_conserving(ctx: Context) -> Outcome:
    start = time.perf_counter()
    policy, opts = ctx.policy, ctx.options

    def gap(fam: Family) -> IntLike:
        r = fam.last
        kv_room = fam.sc.num_kv_blocks - fam.kv.in_use - fam.sc.lookahead  # block_size 1
        return work_gap(fam.config, r, unserved(fam.config, fam.states[-1], r), kv_room)

    def goal(families: Sequence[Family]) -> Any:
        fam = families[0]
        return z3.And(gap(fam) > 0, z3.Not(fam.last.any_preempted), _ample_kv(fam.sc, len(fam.requests)),
                      *_clean(families))

    def judge(traces: Sequence[Trace], results: Sequence[ReplayResult]) -> Optional[str]:
        last = results[0].steps[-1]
        return None if last.work_gap > 0 and not last.preempted else f"the last step's work gap is {last.work_gap}"

    def abstract_gap(st: AbstractState) -> BoolLike:
        r, sc = st.result, st.sc
        kv_room = st.kv.free * sc.block_size - sc.lookahead
        return and_(work_gap(st.config, r, unserved(st.config, st.slots, r), kv_room) > 0, not_(r.any_preempted),
                    _ample_kv(sc, len(st.slots)))

    what = f"work-conserving of {ctx.name}"
    shape = dict(judge=judge, fixed=USER_CAPS_OFF, scheduled_tokens_set=(False,))
    n = opts.max_requests

    try:
        found = search([policy], goal, None, what, min(n, SMALL_SEARCH), opts.timeout_s, **shape)
        if found:
            shown = _replayed_gap(found.traces[0])
            outcome = refuted(ctx, "work-conserving", "search", start, found, f"a step leaves {shown} token(s) unused")
            return replace(outcome, gap=shown)
        # a gap from a state of 2 requests is one from a state of N: the cheap query first
        if all(holds_up_to(policy, abstract_gap, m, opts.timeout_s, what, assume_seq_cap=True, fixed=USER_CAPS_OFF,
                           scheduled_tokens_set=(False,)) for m in sorted({min(2, n), n})):
            return Outcome(ctx.name, "work-conserving", PROVED_UP_TO, "bounded", time.perf_counter() - start,
                           f"no pass from a state of at most {n} requests leaves a gap (user caps off, KV ample)",
                           bound=n)
        searched = min(n, SMALL_SEARCH)  # the trace search grows ~4x per request beyond (35 s at 5)
        return Outcome(ctx.name, "work-conserving", PROVED_UP_TO, "search", time.perf_counter() - start,
                       f"no trace from an empty system of at most {searched} requests and {FAMILY_STEPS} steps "
                       f"leaves a gap (user caps off, KV ample); some pass from an arbitrary state of {n} requests "
                       f"does", bound=searched)
    except Unknown as e:
        return unknown(ctx, "work-conserving", "search", start, str(e))


def _ample_kv(sc: Any, n: int) -> BoolLike:
    """The pool holds ``n`` requests at ``max_model_len`` tokens plus lookahead each."""
    return sc.num_kv_blocks >= n * cdiv(sc.max_model_len + sc.lookahead, sc.block_size)


def _replayed_gap(trace: Trace) -> int:
    return replay_on_model(trace).steps[-1].work_gap


def _comparison(name: str, measure: Callable[[PassResult], IntLike], replayed: Callable[[ReplayResult], int],
                what: str) -> Callable[[Context], Outcome]:
    def decide(ctx: Context) -> Outcome:
        start = time.perf_counter()
        policies = [ctx.policy, get_policy(BASELINE)]

        def goal(families: Sequence[Family], ample_kv: bool = False) -> Any:
            mine, theirs = (measure(f.last) for f in families)
            kv = [_ample_kv(f.sc, len(f.requests)) for f in families] if ample_kv else []
            return z3.And(mine < theirs, *_clean(families), *kv)

        def judge(traces: Sequence[Trace], results: Sequence[ReplayResult]) -> Optional[str]:
            mine, theirs = (replayed(r) for r in results)
            return None if mine < theirs else f"{CHALLENGER} {what} {mine}, {BASELINE} {theirs}"

        try:
            found = search(policies, goal, None, f"{name} of {ctx.name}", ctx.options.max_requests,
                           ctx.options.timeout_s, judge=judge, max_steps=1)
        except Unknown as e:
            return unknown(ctx, name, "search", start, str(e))
        if found:
            a, b = (found.traces[i].expect[-1].num_scheduled_tokens or {} for i in (0, 1))  # type: ignore[union-attr]
            m = min(ctx.options.max_requests, AMPLE_KV_COMPARISON_REQUESTS)
            try:  # is it the budget, or a KV pool too full for the larger chunk? (neither engine shrinks one)
                budget_found = search(policies, lambda fams: goal(fams, ample_kv=True), None,
                                      f"{name} of {ctx.name} (ample KV)", m, ctx.options.timeout_s, judge=judge,
                                      max_steps=1)
            except Unknown as e:
                return unknown(ctx, name, "search", start, str(e))
            kv = (f"; with a KV pool that holds every request, too ({budget_found.requests} request(s))"
                  if budget_found else f"; with a KV pool that holds every request, no first step of up to {m} "
                                       f"requests does")
            return refuted(ctx, name, "search", start, found,
                           f"from the same first step, {CHALLENGER} grants {dict(a)} and {BASELINE} {dict(b)}{kv}")
        return Outcome(ctx.name, name, PROVED_UP_TO, "search", time.perf_counter() - start,
                       f"no first step from an empty system with at most {ctx.options.max_requests} requests",
                       bound=ctx.options.max_requests)
    return decide


def _count(r: PassResult) -> IntLike:
    return sum((ite(s, 1, 0) for s in r.scheduled), 0)


def _is_challenger(policy: BudgetPolicy) -> bool:
    return policy.name == CHALLENGER and type(policy) is type(get_policy(CHALLENGER))


def efficiency_obligations() -> list[Obligation]:
    from ..spec import INVARIANTS

    return [
        Obligation("work-conserving", "efficiency", INVARIANTS["work-conserving"].holds_when, work_conserving),
        Obligation("no-fewer-tokens-than-static", "comparison",
                   f"from the same state, {CHALLENGER} grants at least as many tokens as {BASELINE}",
                   _comparison("no-fewer-tokens-than-static", lambda r: r.total(r.grant),
                               lambda res: res.steps[-1].tokens, "grants"), _is_challenger),
        Obligation("no-fewer-requests-than-static", "comparison",
                   f"from the same state, {CHALLENGER} schedules at least as many requests as {BASELINE}",
                   _comparison("no-fewer-requests-than-static", _count,
                               lambda res: len(res.steps[-1].num_scheduled_tokens), "schedules"), _is_challenger),
    ]
