"""Obligations of a loop the pass skeleton does not model: a bounded trace search over the model."""
from __future__ import annotations

import itertools
import multiprocessing
import time
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Optional

from ..model import BudgetConfig, BudgetPolicy, builtin_policies, get_policy
from ..model.config_edges import least_pool, validates
from ..model.one_pass_loop import OnePassLoop
from ..model.registry import policy_spec
from ..model.replay import replay_on_model
from ..model.target import ModelTarget
from ..spec.invariants import MODEL_JUDGED, SMALLEST_DRAIN_BOUND, check_run
from ..spec.records import RequestState, RunRecord
from ..spec.trace import AddOp, Op, StepOp, Trace, ViolationExpectation
from .verdicts import MODEL_SEARCH, PROVED_UP_TO, REFUTED, Outcome

MAX_REQUESTS = 6  # the family's most requests, whatever --max-requests asks
FOUND_BY = "tokenbudget prove (bounded trace search over the model)"
# What the search judges: the invariants a model run can break (the ledger and step invariants, the run's).
SEARCHED = MODEL_JUDGED


def skeleton_models(policy: BudgetPolicy) -> bool:
    """Whether the pass skeleton models the policy's loop: a one-pass loop whose step it follows."""
    return issubclass(policy.loop, OnePassLoop) and policy.loop.skeleton_follows


@dataclass(frozen=True)
class Tier:
    """Configs and request shapes searched together: (page size, max_model_len) pairs, the
    draft counts, the pool above the least the policy accepts (pages),
    and the prompts and max_tokens of a shape, as functions of the page."""

    pages: tuple[tuple[int, int], ...]
    ks: tuple[int, ...]
    extra_pages: tuple[int, ...]
    prompts: Callable[[int], tuple[int, ...]]
    max_tokens: Callable[[int], tuple[int, ...]]


# Searched one after the other, each for 1 to N requests: tokens and pages of two; then a page
# larger than a verify's reach (2 + 2k for k <= 2), where page-rounding rules that look only at a
# sequence's last page differ; then the pages of real deployments (16 to 128), with prompts that
# end a token short of a page, where a decode's reservation crosses into a new page and a rule
# counting tokens instead of pages (more than 21 + 2k of them) undercounts it.
TIERS = (
    Tier(((1, 4), (1, 8), (2, 4), (2, 8)), (1, 2, 3, 4), (0, 1, 2, 3), lambda page: (1, 2, 3),
         lambda page: (1, 2, 4, 8)),
    Tier(((8, 16),), (1, 2, 3), (0, 1, 3), lambda page: (1, 2, 3), lambda page: (1, 2, 4, 8)),
    Tier(((16, 64), (32, 128), (64, 256), (128, 512)), (1, 2, 4), (0, 1), lambda page: (1, page - 1),
         lambda page: (2, 8, page)),
)


def _configs(policy: BudgetPolicy, n: int, tier: Tier) -> Iterator[BudgetConfig]:
    """Small configs of the tier the policy accepts, with n seats and B = max(n * (1 + k), page)."""
    for (page, max_len), k, extra in itertools.product(tier.pages, tier.ks, tier.extra_pages):
        probe = BudgetConfig(max_num_batched_tokens=max(n * (1 + k), page), max_num_seqs=n, num_speculative_tokens=k,
                             method="eagle3", block_size=page, num_kv_blocks=1, max_model_len=max_len,
                             enable_prefix_caching=False)
        ample = probe.replace(num_kv_blocks=4096)
        if validates(policy, ample):
            yield probe.replace(num_kv_blocks=least_pool(policy, ample) + extra)


def _run(policy: BudgetPolicy, cfg: BudgetConfig, n: int, prompt: int, max_tokens: int,
         accept: bool) -> Optional[tuple[list[Op], set[str]]]:
    """Run n requests of one shape to the end, every draft rejected (or, ``accept``, every
    one accepted); the ops up to the last violating step and the invariants broken, or None
    when the run breaks nothing."""
    target = ModelTarget(cfg, policy)
    run = RunRecord(limits=target.limits)
    ops: list[Op] = []
    for i in range(n):
        op = AddOp(f"r{i}", prompt, max_tokens)
        target.add(op)
        ops.append(op)
        run.events.append(("add", op.id))
        run.added[op.id] = RequestState("waiting", 0, 0, max_tokens, prompt)
    bound = 2 * n * (prompt + max_tokens) + 2 * n + SMALLEST_DRAIN_BOUND
    for index in range(bound):
        accepted = {f"r{i}": cfg.num_speculative_tokens for i in range(n)} if accept else {}
        record, outcome = target.step(accepted)
        ops.append(StepOp(accepted))
        run.steps.append(record)
        run.outcomes.append(outcome)
        run.events.append(("step", index))
        if record.error is not None or not target.scheduler.has_unfinished:
            break
    violations = check_run(run)
    if not violations:
        return None
    broken = {v.invariant for v in violations}
    last = max(v.step for v in violations if v.step is not None)
    return ops[:n + last + 1], broken


def search(policy: BudgetPolicy, max_requests: int, jobs: int = 1) -> dict[str, Trace]:
    """The first trace of the family that breaks each invariant in ``SEARCHED``, replayed.
    With ``jobs`` > 1 the family's parts (a tier and a request count each) are searched in
    that many processes and merged in the family's order: the same traces as one process."""
    parts = list(itertools.product(range(len(TIERS)), range(1, max_requests + 1)))
    found: dict[str, Trace] = {}
    if jobs <= 1:
        for tier, n in parts:
            found.update(_search_part(policy, tier, n, set(found)))
            if set(SEARCHED) <= set(found):
                break
        return found
    with multiprocessing.Pool(min(jobs, len(parts))) as pool:
        for part in pool.imap(_search_part_of, [(policy_spec(policy), tier, n) for tier, n in parts]):
            for invariant, trace in part.items():
                found.setdefault(invariant, trace)
    return found


def _search_part_of(args: tuple[str, int, int]) -> dict[str, Trace]:
    spec, tier, n = args
    return _search_part(get_policy(spec), tier, n, set())


def _search_part(policy: BudgetPolicy, tier_index: int, n: int, known: set[str]) -> dict[str, Trace]:
    """The first trace of ``n`` requests in tier ``tier_index`` breaking each invariant not in ``known``."""
    tier, found = TIERS[tier_index], {}
    for cfg in _configs(policy, n, tier):
        shapes = itertools.product((False, True), tier.prompts(cfg.block_size), tier.max_tokens(cfg.block_size))
        for accept, prompt, max_tokens in shapes:
            if prompt > policy.loop.longest_prompt(cfg):
                continue
            result = _run(policy, cfg, n, prompt, max_tokens, accept)
            if result is None:
                continue
            ops, broken = result
            for invariant in sorted(broken - known - set(found)):
                what = "every draft accepted" if accept else "no draft accepted"
                trace = Trace(policy_spec(policy), cfg.to_dict(), tuple(ops), (ViolationExpectation(invariant),),
                              f"{n} request(s) of {prompt} prompt tokens, max_tokens {max_tokens}, {what}",
                              FOUND_BY)
                replayed = replay_on_model(trace, policy)
                if invariant in {v.invariant for v in replayed.violations}:
                    found[invariant] = trace
            if set(SEARCHED) <= known | set(found):
                return found
    return found


def searched(policy: BudgetPolicy, max_requests: int, jobs: int = 1) -> tuple[dict[str, Trace], float]:
    """``search`` up to ``max_requests`` (at most MAX_REQUESTS) in ``jobs`` processes, and the seconds it took."""
    start = time.perf_counter()
    return search(policy, min(max_requests, MAX_REQUESTS), jobs), time.perf_counter() - start


def decide(ctx: Any, invariant: str) -> Outcome:
    """The bounded-search verdict on ``invariant`` for ctx's policy; the search runs once a
    context (a policy under proof) and its result is shared by the obligations (``prove`` may
    hand a context the result of a search run before, as ``ctx._loop_search``)."""
    n = min(ctx.options.max_requests, MAX_REQUESTS)
    cached = getattr(ctx, "_loop_search", None)
    if cached is None:
        cached = searched(ctx.policy, n)
        setattr(ctx, "_loop_search", cached)
    found, seconds = cached
    if invariant in found:
        trace = found[invariant]
        cfg = trace.config
        detail = (f"B={cfg['max_num_batched_tokens']}, S={cfg['max_num_seqs']}, k={cfg['num_speculative_tokens']}, "
                  f"pool {cfg['num_kv_blocks']} x {cfg['block_size']}; {trace.description}; {trace.num_steps} step(s)")
        return Outcome(ctx.name, invariant, REFUTED, MODEL_SEARCH, seconds, detail, traces=(trace,))
    return Outcome(ctx.name, invariant, PROVED_UP_TO, MODEL_SEARCH, seconds,
                   f"bounded trace search over the model: no run of up to {n} requests of one shape, in the "
                   "searched small configs, breaks it (not a proof for larger states)", bound=n)


def skeleton_policies() -> list[str]:
    """The built-in policies whose loop the pass skeleton models, by name."""
    return [name for name, cls in builtin_policies().items() if skeleton_models(cls)]  # type: ignore[arg-type]
