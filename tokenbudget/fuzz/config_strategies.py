"""Config strategies: deployments a policy accepts, realistic ones and adversarial corners."""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

from hypothesis import strategies as st

from ..model import BudgetConfig, BudgetPolicy, ConfigError, OnePassLoop, methods
from ..model.config_edges import largest_accepted, least_pool, validates
from ..model.findings import findings_of
from ..spec.intlike import cdiv

SCALES = ("deployment", "small", "draft-edge", "rows-edge")
MAX_K = 16
MAX_SEQS = 1024
MAX_POOL = 1 << 15  # blocks; an ample pool beyond this adds nothing to a short run

Draw = st.DrawFn


@dataclass(frozen=True)
class ConfigSpace:
    """The knobs a policy's validation lets vary around a config it accepts."""

    methods: tuple[str | None, ...]  # None: speculative decoding off
    max_k: int
    max_seqs: int
    scheduling_policies: tuple[str, ...]
    parallel_drafting: bool
    max_num_scheduled_tokens: bool  # a user-set T is accepted
    chunked_prefill_off: bool  # enable_chunked_prefill=False is accepted
    min_model_len: int  # the smallest max_model_len accepted (of 2, 4, ..., 64)
    long_prefill_threshold: bool  # the policy's loop reads long_prefill_token_threshold
    model_len_on_block_grid: bool = False  # max_model_len must be a multiple of block_size (FastDeploy's worker)
    model_len_multiple: int = 1  # and of this (FastDeploy's attention backend: 64)
    pool_spare_blocks: int = 0  # blocks a pool needs past one max_model_len sequence (FastDeploy's startup: 2)
    serves_async: bool = False  # the engine runs some accepted method async (vLLM's AsyncScheduler)


def config_space(policy: BudgetPolicy) -> ConfigSpace:
    """Probe the policy's validation one knob at a time around a roomy config.

    Raises ConfigError when the policy accepts none of the probe configs.
    """
    base = BudgetConfig(max_num_batched_tokens=4096, max_num_seqs=1, max_model_len=4096)
    table = methods.TABLES[policy.table]
    spec_ok = [m for m in sorted(table) if validates(policy, base.replace(num_speculative_tokens=1, method=m))]
    found: tuple[str | None, ...] = ((None,) if validates(policy, base) else ()) + tuple(spec_ok)
    if not found:
        raise ConfigError(f"{policy.name}: found no config the policy accepts to fuzz; check its validate()")
    probe = base.replace(num_speculative_tokens=1, method=spec_ok[0]) if spec_ok else base
    max_k = max((k for k in range(1, MAX_K + 1) if spec_ok and validates(policy, probe.replace(num_speculative_tokens=k))),
                default=0)
    real = probe.replace(engine_version=policy.versions[-1]) if policy.versions else probe  # the engine's startup checks
    max_seqs = max(s for s in (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, MAX_SEQS)
                   if s == 1 or validates(policy, probe.replace(max_num_seqs=s)))
    return ConfigSpace(
        methods=found,
        max_k=max_k,
        max_seqs=max_seqs,
        scheduling_policies=("fcfs",) + (("priority",) if validates(policy, probe.replace(scheduling_policy="priority")) else ()),
        parallel_drafting=bool(spec_ok) and any(
            validates(policy, probe.replace(method=m, parallel_drafting=True)) for m in spec_ok
            if table[m].parallel_draft_slots is not None),
        max_num_scheduled_tokens=validates(policy, probe.replace(max_num_scheduled_tokens=4096)),
        chunked_prefill_off=validates(policy, probe.replace(enable_chunked_prefill=False)),
        min_model_len=min((m for m in (2, 4, 8, 16, 32, 64) if validates(
            policy, real.replace(max_model_len=m, max_num_seqs=64, max_num_batched_tokens=64 * m))), default=2),
        long_prefill_threshold=issubclass(policy.loop, OnePassLoop) and policy.loop.applies_long_prefill_threshold,
        model_len_on_block_grid=not validates(policy, probe.replace(max_model_len=base.max_model_len - 1)),
        model_len_multiple=next((m for m in (1, 2, 4, 8, 16, 32, 64, 128) if validates(
            policy, real.replace(max_model_len=base.max_model_len + m))), 1),
        pool_spare_blocks=next((n for n in range(3) if validates(
            policy, real.replace(num_kv_blocks=cdiv(base.max_model_len, base.block_size) + n))), 0),
        serves_async=any(serves_async(policy, base.replace(num_speculative_tokens=1, method=m)) for m in spec_ok),
    )


def serves_async(policy: BudgetPolicy, cfg: BudgetConfig) -> bool:
    """Whether the policy's engine runs ``cfg`` async: its loop has an async form for cfg's method."""
    try:
        policy.async_loop(cfg.replace(async_scheduling=True))
    except ConfigError:
        return False
    return True


def log_int(lo: int, hi: int) -> st.SearchStrategy[int]:
    """Integers in [lo, hi], each power-of-two range equally likely (lo >= 1)."""
    return st.integers(lo.bit_length() - 1, hi.bit_length() - 1).flatmap(
        lambda e: st.integers(max(lo, 1 << e), min(hi, (1 << (e + 1)) - 1)))


def configs(policy: BudgetPolicy, space: ConfigSpace | None = None,
            scales: tuple[str, ...] = SCALES) -> st.SearchStrategy[BudgetConfig]:
    """Configs the policy accepts, drawn from ``scales`` (see the module docstring)."""
    return candidate_configs(policy, space, scales).filter(lambda cfg: validates(policy, cfg))


def candidate_configs(policy: BudgetPolicy, space: ConfigSpace | None = None,
                      scales: tuple[str, ...] = SCALES) -> st.SearchStrategy[BudgetConfig]:
    """The configs ``configs`` draws before it drops those the policy rejects: built valid
    from the policy's ``ConfigSpace``, so the policy should accept nearly all of them."""
    space = space or config_space(policy)
    return _draw_config(policy, space, scales)


@st.composite
def _draw_config(draw: Draw, policy: BudgetPolicy, space: ConfigSpace, scales: tuple[str, ...]) -> BudgetConfig:
    """One candidate config (``candidate_configs``). Defined once, at module level:
    Hypothesis parses a composite's source as it is defined (about 0.1 s each time)."""
    table = methods.TABLES[policy.table]
    method = draw(st.sampled_from(space.methods))
    k = 0 if method is None else draw(st.integers(1, space.max_k))
    parallel = bool(method and space.parallel_drafting and table[method].parallel_draft_slots is not None
                    and draw(st.booleans()))
    d = int(methods.draft_slots(policy.table, method, k, parallel)) if method else 0
    budget, seqs, block_size, model_len = _limits(draw, draw(st.sampled_from(scales)), d, k, space.max_seqs)
    chunked = not (space.chunked_prefill_off and budget >= 2) or draw(st.sampled_from((True, True, False)))
    model_len = max(space.min_model_len, min(model_len, budget) if not chunked else model_len)
    if space.model_len_on_block_grid or space.model_len_multiple > 1:
        grid = math.lcm(block_size if space.model_len_on_block_grid else 1, space.model_len_multiple)
        model_len = cdiv(model_len, grid) * grid
    scheduled = None
    if space.max_num_scheduled_tokens and draw(st.sampled_from((False, False, True))):
        scheduled = draw(st.integers(1, 2 * budget))
    cfg = BudgetConfig(
        max_num_batched_tokens=budget,
        max_num_seqs=seqs,
        max_num_scheduled_tokens=scheduled,
        num_speculative_tokens=k,
        method=method,
        parallel_drafting=parallel,
        block_size=block_size,
        num_kv_blocks=_pool(draw, cdiv(model_len, block_size) + space.pool_spare_blocks),
        max_model_len=model_len,
        long_prefill_token_threshold=_threshold(draw, k, model_len) if space.long_prefill_threshold else 0,
        scheduling_policy=draw(st.sampled_from(space.scheduling_policies)),
        enable_chunked_prefill=chunked,
        enable_prefix_caching=draw(st.sampled_from((True, False))),
    )
    if asks_more_pool(policy, cfg) and draw(st.booleans()):
        if draw(st.booleans()):
            cfg = _deployed_pages(draw, policy, cfg, space)
        return at_the_boundary(policy, cfg, space)
    return cfg


DEPLOYED_PAGES = (1, 16, 32, 64, 128)  # the page sizes real deployments run (SGLang's default is 1)
MAX_PAGE_K = 8


def _deployed_pages(draw: Draw, policy: BudgetPolicy, cfg: BudgetConfig, space: ConfigSpace) -> BudgetConfig:
    """cfg (accepted) with a deployment's page, max_model_len of 2 to 4 pages (a small pool
    of whole pages, so a few requests cross page boundaries together), speculation on with k
    up to ``MAX_PAGE_K`` and B from one page up; cfg itself when the policy refuses that."""
    page = draw(st.sampled_from(DEPLOYED_PAGES))
    speculative = [m for m in space.methods if m is not None]
    if not speculative:
        return cfg
    method = cfg.method or draw(st.sampled_from(speculative))
    k = draw(st.integers(1, min(space.max_k, MAX_PAGE_K)))
    model_len = max(space.min_model_len, page * draw(st.integers(2, 4)) if page > 1 else cfg.max_model_len)
    seqs = max(1, min(cfg.max_num_seqs, 8))
    budget = max(page, seqs * (1 + k), draw(st.sampled_from((page, page, 2 * page, model_len))))
    repaired = cfg.replace(block_size=page, method=method, num_speculative_tokens=k, max_model_len=model_len,
                           max_num_seqs=seqs, parallel_drafting=False,
                           max_num_batched_tokens=budget, max_num_scheduled_tokens=None,
                           num_kv_blocks=MAX_POOL, enable_chunked_prefill=True)  # at_the_boundary takes it down
    return repaired if validates(policy, repaired) else cfg


def asks_more_pool(policy: BudgetPolicy, cfg: BudgetConfig) -> bool:
    """Whether the policy accepts cfg and asks a larger KV pool than one ``max_model_len``
    sequence (SGLang's model: one sequence and its decode reservation). The repair
    toward the boundary is drawn only then: the draws of the other policies stay as they were.
    Acceptance is monotone in the pool, so refusing that one pool tells (no bisection)."""
    one_sequence = cdiv(cfg.max_model_len, cfg.block_size)
    return (validates(policy, cfg) and cfg.num_kv_blocks > one_sequence
            and not validates(policy, cfg.replace(num_kv_blocks=one_sequence)))


def asks_more_pool_of(policy: BudgetPolicy) -> bool:
    """``asks_more_pool`` on a roomy config the policy accepts (speculation on where it can):
    whether the policy's validation asks a pool past one sequence at all."""
    base = BudgetConfig(max_num_batched_tokens=4096, max_num_seqs=1, max_model_len=64, num_kv_blocks=MAX_POOL)
    probes = [base.replace(num_speculative_tokens=1, method=m) for m in sorted(methods.TABLES[policy.table])] + [base]
    return next((asks_more_pool(policy, cfg) for cfg in probes if validates(policy, cfg)), False)


def at_the_boundary(policy: BudgetPolicy, cfg: BudgetConfig, space: ConfigSpace) -> BudgetConfig:
    """cfg (accepted) repaired toward the edge of what the policy accepts: the most
    sequences it allows, then the least KV pool (where many requests contend for the
    fewest blocks)."""
    seqs = largest_accepted(lambda s: validates(policy, cfg.replace(max_num_seqs=s)), cfg.max_num_seqs,
                            max(cfg.max_num_seqs, space.max_seqs))
    cfg = cfg.replace(max_num_seqs=seqs)
    return cfg.replace(num_kv_blocks=least_pool(policy, cfg))




def _limits(draw: Draw, scale: str, d: int, k: int, max_seqs: int) -> tuple[int, int, int, int]:
    """B, S, block size and max_model_len of one scale."""
    if scale == "deployment":
        budget = draw(log_int(512, 65536))
        seqs = draw(log_int(1, min(MAX_SEQS, max_seqs, budget)))
        block_size = draw(st.sampled_from((16, 32, 64, 128)))
        return budget, seqs, block_size, draw(log_int(max(2, budget // 8), 4 * budget))
    if scale == "rows-edge":
        per_seq = draw(st.integers(1, 64))
        budget = max(1, per_seq * (k + 1) + draw(st.integers(-8, 8)))
        seqs = per_seq + draw(st.integers(-2, 2))
    else:
        budget = draw(st.integers(1, 256)) if scale == "small" else d + draw(st.integers(1, 4))
        seqs = draw(log_int(1, 64))
    seqs = max(1, min(seqs, budget, max_seqs))
    model_len = draw(st.one_of(st.integers(2, 64), st.integers(budget, 4 * budget + 2)))
    return budget, seqs, draw(st.sampled_from((1, 2, 4, 8, 16))), model_len


def _pool(draw: Draw, min_blocks: int) -> int:
    """KV blocks: the minimum for one sequence (or a few more), a few sequences, or ample."""
    size = draw(st.sampled_from(("tight", "moderate", "ample")))
    if size == "tight":
        return min_blocks + draw(st.integers(0, 2))
    if size == "moderate":
        return min_blocks * draw(st.integers(2, 4))
    return max(min_blocks, MAX_POOL)


def _threshold(draw: Draw, k: int, model_len: int) -> int:
    """long_prefill_token_threshold: off, below 1 + k, or anywhere up to max_model_len."""
    kind = draw(st.sampled_from(("off", "off", "below-1+k", "any")))
    if kind == "off":
        return 0
    return draw(st.integers(1, min(k + 1, model_len) if kind == "below-1+k" else model_len))


def same_step_refund_configs(policy: BudgetPolicy, space: ConfigSpace | None = None) -> st.SearchStrategy[BudgetConfig]:
    """Configs where a same-step refund is likely (``_refund_config``), those the policy
    accepts; nothing when it has no priority scheduling."""
    return _under_priority(policy, space, _refund_config)


@st.composite
def _refund_config(draw: Draw, policy: BudgetPolicy, space: ConfigSpace) -> BudgetConfig:
    """Priority scheduling, speculation with d > 0 where a method of the table has it (the
    input budget differs from the token budget only then), 3-8 seats and small blocks, aimed
    at one of two paths. A same-step refund: a pool of one ``max_model_len`` sequence and a
    few blocks more, where a request that arrived more urgent (``request_shapes.resolve``)
    and runs behind less urgent ones, short of a block, preempts the least urgent, which the
    running loop scheduled earlier in the same pass; B a little short of every seat's decode,
    so the input budget binds after the refund (or, one run in three where T may be set, T
    short of it, so the token budget does). The input-budget stop: B room for the decodes of
    about half the seats and a part of one more, so the running loop grants a part and stops
    on ``input budget <= d`` ahead of the rest."""
    refund = draw(st.booleans())
    method, parallel, k, d = _with_draft_slots(draw, policy, space)
    seqs = draw(st.integers(3, min(8, space.max_seqs)))
    block_size = draw(st.sampled_from((1, 2, 4)))
    model_len = max(space.min_model_len, draw(st.integers(16, 64)))
    per_decode = 1 + k + d
    scheduled = None
    if refund:
        budget = seqs * per_decode - draw(st.integers(1, 2 * per_decode))  # the input budget binds after the refund
        if space.max_num_scheduled_tokens and draw(st.integers(0, 2)) == 0:
            budget, scheduled = budget + seqs * d, budget  # the token budget binds instead
    else:
        budget = (seqs // 2) * per_decode + d + draw(st.integers(1, per_decode))
    pool = cdiv(model_len, block_size) + draw(st.integers(0, 4)) if refund or draw(st.booleans()) else MAX_POOL
    return BudgetConfig(
        max_num_batched_tokens=max(budget, seqs, d + 1), max_num_seqs=seqs, max_num_scheduled_tokens=scheduled,
        num_speculative_tokens=k, method=method, parallel_drafting=parallel, block_size=block_size,
        max_model_len=model_len, num_kv_blocks=pool, scheduling_policy="priority",
        enable_prefix_caching=draw(st.booleans()))


def _with_draft_slots(draw: Draw, policy: BudgetPolicy, space: ConfigSpace) -> tuple[str | None, bool, int, int]:
    """Method, parallel drafting, k (2-4 where allowed) and d: a method with d > 0 where the
    policy's table has one (the input budget differs from the token budget only then)."""
    k = draw(st.integers(min(2, space.max_k), max(1, min(4, space.max_k))))
    table = methods.TABLES[policy.table]
    choices = [(m, parallel) for m in space.methods if m is not None for parallel in (False, True)
               if (not parallel or (space.parallel_drafting and table[m].parallel_draft_slots is not None))
               and methods.draft_slots(policy.table, m, k, parallel) > 0]
    if not choices:
        choices = [(m, False) for m in space.methods]
    method, parallel = draw(st.sampled_from(choices))
    k = k if method else 0
    return method, parallel, k, int(methods.draft_slots(policy.table, method, k, parallel)) if method else 0


def priority_wave_configs(policy: BudgetPolicy, space: ConfigSpace | None = None) -> st.SearchStrategy[BudgetConfig]:
    """Configs for a wave of short prompts behind a least-urgent request
    (``request_shapes.priority_waves``), those the policy accepts; nothing when it has no
    priority scheduling."""
    return _under_priority(policy, space, _wave_config)


def _under_priority(policy: BudgetPolicy, space: ConfigSpace | None,
                    shape: Callable[[BudgetPolicy, ConfigSpace], st.SearchStrategy[BudgetConfig]]
                    ) -> st.SearchStrategy[BudgetConfig]:
    """The configs of a priority-scheduling ``shape`` the policy accepts; nothing when it has
    no priority scheduling."""
    space = space or config_space(policy)
    if "priority" not in space.scheduling_policies:
        return st.nothing()
    return shape(policy, space).filter(lambda cfg: validates(policy, cfg))


@st.composite
def _wave_config(draw: Draw, policy: BudgetPolicy, space: ConfigSpace) -> BudgetConfig:
    """Priority scheduling, d > 0 where a method has it, 6-8 seats and blocks of 2 or 4, for
    ``request_shapes.priority_waves``. The budget covers the decodes of 3 or 4 requests and a
    part of one more: the input budget B (grants plus d each) or, one draw in three where T
    may be set (the one Hypothesis leans away from), the token budget T (grants only; B then
    has room for every seat's d too). The pool (one ``max_model_len`` sequence) holds 2-4 more
    such requests' first decodes (a prompt of 2, 1 + k, and k slots of lookahead) than that.
    The wave's prompts cost less to admit than a decode, so more are admitted than the next
    pass can grant; in that pass the running loop grants the least-urgent request first, a
    wave request short of a block preempts it (a same-step refund), and the requests behind
    ask for more than is left. Tuned on the model: the refund with the budget spent in the
    same pass in about half of these runs."""
    method, parallel, k, d = _with_draft_slots(draw, policy, space)
    seqs = draw(st.integers(min(6, space.max_seqs), min(8, space.max_seqs)))
    block_size = draw(st.sampled_from((2, 4)))
    held = draw(st.integers(3, 4))  # the decodes the budget grants whole
    part = draw(st.integers(d + 1, k + d))  # and the rest, a part of one more
    scheduled = None
    if space.max_num_scheduled_tokens and draw(st.integers(0, 2)) == 2:  # Hypothesis leans to 0: B binds then
        scheduled = held * (1 + k) + part - d
        budget = scheduled + seqs * d
    else:
        budget = held * (1 + k + d) + part
    pool = cdiv((held + draw(st.integers(2, 4))) * (2 + 1 + 2 * k), block_size)
    return BudgetConfig(
        max_num_batched_tokens=max(budget, seqs, d + 1), max_num_seqs=seqs, max_num_scheduled_tokens=scheduled,
        num_speculative_tokens=k, method=method, parallel_drafting=parallel, block_size=block_size,
        max_model_len=max(space.min_model_len, pool * block_size), num_kv_blocks=pool,
        scheduling_policy="priority", enable_prefix_caching=draw(st.booleans()))


def older_version_configs(policy: BudgetPolicy, strategy: st.SearchStrategy[BudgetConfig]
                          ) -> st.SearchStrategy[BudgetConfig]:
    """Configs of ``strategy`` that name one of the other engine versions the policy models
    (``versions`` but the one a config without ``engine_version`` follows: the older ones, and
    vLLM 0.34, newer than its default), those the policy accepts; nothing for a policy of one
    version. A finding of an older version only (vLLM 0.32's self-preemption, F3) is reachable only so."""
    default = policy.engine_version(BudgetConfig())
    older = tuple(v for v in policy.versions if v != default)
    if not older:
        return st.nothing()
    return st.tuples(strategy, st.sampled_from(older)).map(
        lambda pair: pair[0].replace(engine_version=pair[1])).filter(lambda cfg: validates(policy, cfg))


# -- rare paths: config shapes aimed at one path each, small so that a run stays short -----
RARE_MAX_SEQS = 4  # the cost cap of every rare-path shape: few seats, short sequences
RARE_MODEL_LEN = (8, 64)


def rare_path_configs(policy: BudgetPolicy, space: ConfigSpace | None = None) -> dict[str, st.SearchStrategy[BudgetConfig]]:
    """The rare-path shapes that apply to the policy, by name, each drawing only configs it
    accepts: a full decode batch at the least B (``full-batch``, where decodes run unvisited
    on the blocks they hold, or a short admission is padded), an admission over the room (``admission-over-room``, where the loop pads a
    short admission), a preemption under priority (``priority-preemption``, where it accepts
    priority), decodes on page edges (``page-edge``, where its pool must hold more than one
    sequence), the scales run async (``async``, where the engine serves async: vLLM's
    AsyncScheduler), and its older engine versions on all of these and the scales
    (``older-version``, where a finding affects an older version alone)."""
    space = space or config_space(policy)
    speculative = any(m is not None for m in space.methods)
    shaped = {}
    one_pass = issubclass(policy.loop, OnePassLoop)  # the skeleton's flags: SGLang's loop has none
    pads = one_pass and speculative and policy.loop.pads_short_admissions
    if (one_pass and policy.loop.decodes_bypass_budget) or pads:
        shaped["full-batch"] = _full_batch_config(policy, space)
    if pads:
        shaped["admission-over-room"] = _admission_over_room_config(policy, space)
    if "priority" in space.scheduling_policies:
        shaped["priority-preemption"] = _priority_preemption_config(policy, space)
    if speculative and asks_more_pool_of(policy):
        shaped["page-edge"] = _page_edge_config(policy, space)
    if space.serves_async:  # the scales, run as vLLM deploys them
        shaped["async"] = configs(policy, space).map(lambda cfg: cfg.replace(async_scheduling=True)).filter(
            lambda cfg: serves_async(policy, cfg))
    out = {name: s.filter(lambda cfg: validates(policy, cfg)) for name, s in shaped.items()}
    if _older_only_findings(policy):
        out["older-version"] = older_version_configs(policy, st.one_of(configs(policy, space), *out.values()))
    return out


def _older_only_findings(policy: BudgetPolicy) -> bool:
    """Whether a finding about the policy's engine affects an older version it models but
    not the newest (vLLM 0.32's self-preemption, F3), which only a config naming it runs."""
    older, newest = policy.versions[:-1], policy.versions[-1:]
    return any(set(f.affects_versions) & set(older) and not set(f.affects_versions) & set(newest)
               for f in findings_of(getattr(policy, "engine", None)))


def _spec(draw: Draw, policy: BudgetPolicy, space: ConfigSpace, k_lo: int, k_hi: int,
          parallel: bool = False) -> tuple[str | None, int, int, bool]:
    """A speculative method of the policy (None when it has none), k in [k_lo, k_hi] within
    its limit, d, and whether drafting is parallel (with ``parallel``, one draw in two where
    the policy and the method have it: d > 0 for methods whose serial drafting takes no rows)."""
    speculative = [m for m in space.methods if m is not None]
    if not speculative:
        return None, 0, 0, False
    method = draw(st.sampled_from(speculative))
    k = draw(st.integers(max(1, min(k_lo, space.max_k)), max(1, min(k_hi, space.max_k))))
    parallel = parallel and space.parallel_drafting and \
        methods.TABLES[policy.table][method].parallel_draft_slots is not None and draw(st.booleans())
    return method, k, int(methods.draft_slots(policy.table, method, k, parallel)), parallel


def least_budget(policy: BudgetPolicy, cfg: BudgetConfig) -> BudgetConfig:
    """cfg with the least max_num_batched_tokens the policy accepts (cfg itself when it
    refuses cfg): where the startup check's bound on B for the seats lies."""
    if not validates(policy, cfg):
        return cfg
    least = -largest_accepted(lambda b: validates(policy, cfg.replace(max_num_batched_tokens=-b)),
                              -cfg.max_num_batched_tokens, -1)
    return cfg.replace(max_num_batched_tokens=least)


@st.composite
def _full_batch_config(draw: Draw, policy: BudgetPolicy, space: ConfigSpace) -> BudgetConfig:
    """A full decode batch: 1-4 seats, B the least the policy accepts for them (a budget
    check of the form B >= S * t lets S decodes fill it: FastDeploy's full-batch deadlock,
    F5; vLLM's least B leaves a waiting request less room than a padded admission: F4),
    small blocks so that decodes cross block boundaries, an ample pool."""
    method, k, d, _ = _spec(draw, policy, space, 1, 4)
    seqs = draw(st.integers(1, min(RARE_MAX_SEQS, space.max_seqs)))
    model_len = max(space.min_model_len, draw(st.integers(*RARE_MODEL_LEN)))
    cfg = BudgetConfig(max_num_batched_tokens=max(model_len, 1 + k + d) * seqs, max_num_seqs=seqs,
                       num_speculative_tokens=k, method=method, block_size=draw(st.sampled_from((1, 2, 4))),
                       num_kv_blocks=MAX_POOL, max_model_len=model_len,
                       enable_prefix_caching=draw(st.booleans()))
    return least_budget(policy, cfg)


@st.composite
def _admission_over_room_config(draw: Draw, policy: BudgetPolicy, space: ConfigSpace) -> BudgetConfig:
    """The room of a waiting request, B - d, below what it must take at once, at any engine
    version the policy models, one of three ways: B from the least the policy accepts up to
    d + k, below a padded admission of 1 + k rows (vLLM never schedules it: F4); B ample and
    a threshold at most k (the padding cut: F1); or chunked prefill off (where accepted) with
    B the least the policy accepts, about max_model_len, and parallel drafting, so that a
    long prompt does not fit beside d (F2)."""
    way = draw(st.sampled_from(("padding", "threshold", "unchunked")))
    way = way if way != "threshold" or space.long_prefill_threshold else "padding"
    way = way if way != "unchunked" or space.chunked_prefill_off else "padding"
    method, k, d, parallel = _spec(draw, policy, space, 2, 8, parallel=way == "unchunked")
    model_len = max(space.min_model_len, draw(st.integers(*RARE_MODEL_LEN)))
    cfg = BudgetConfig(max_num_batched_tokens=d + k if way == "padding" else 4 * model_len,
                       max_num_seqs=draw(st.integers(1, min(RARE_MAX_SEQS, space.max_seqs))),
                       num_speculative_tokens=k, method=method, parallel_drafting=parallel,
                       block_size=draw(st.sampled_from((1, 2, 4))), num_kv_blocks=MAX_POOL, max_model_len=model_len,
                       long_prefill_token_threshold=draw(st.integers(1, max(1, k))) if way == "threshold" else 0,
                       enable_chunked_prefill=way != "unchunked", enable_prefix_caching=draw(st.booleans()),
                       engine_version=draw(st.sampled_from(policy.versions or (None,))))
    if way == "threshold":
        return cfg
    least = least_budget(policy, cfg).max_num_batched_tokens
    return cfg.replace(max_num_batched_tokens=draw(st.integers(least, max(least, d + k))) if way == "padding"
                       else least)


@st.composite
def _priority_preemption_config(draw: Draw, policy: BudgetPolicy, space: ConfigSpace) -> BudgetConfig:
    """Priority scheduling on a pool of one max_model_len sequence and a block or two, at any
    engine version the policy models: two requests decoding run out of blocks, and the least
    urgent, admitted first, may be the one that needs a block (vLLM 0.32 preempts it and
    grants nothing: F3)."""
    off = None in space.methods and draw(st.booleans())
    method, k, _, _ = (None, 0, 0, False) if off else _spec(draw, policy, space, 1, 4)
    block = draw(st.sampled_from((1, 2, 4)))
    model_len = max(space.min_model_len, draw(st.integers(16, 64)))
    return BudgetConfig(max_num_batched_tokens=draw(st.integers(model_len, 2 * model_len)),
                        max_num_seqs=draw(st.integers(2, max(2, min(RARE_MAX_SEQS, space.max_seqs)))),
                        num_speculative_tokens=k, method=method, block_size=block,
                        num_kv_blocks=cdiv(model_len, block) + draw(st.integers(0, 2)), max_model_len=model_len,
                        scheduling_policy="priority", enable_prefix_caching=draw(st.booleans()),
                        engine_version=draw(st.sampled_from(policy.versions or (None,))))


@st.composite
def _page_edge_config(draw: Draw, policy: BudgetPolicy, space: ConfigSpace) -> BudgetConfig:
    """Pages of a deployment larger than 2 + 2k (where SGLang's spec-v1 page check skips a
    KV that ends on a page: F6), max_model_len of 2-4 pages, 2-8 seats and the least pool the
    policy accepts for them: a burst of as many whole-page prompts
    (``request_shapes.page_bursts``) then decodes from full pages together, with no page to
    spare."""
    page = draw(st.sampled_from((16, 32, 64)))
    method, k, _, _ = _spec(draw, policy, space, 1, min(MAX_PAGE_K, (page - 3) // 2))
    model_len = max(space.min_model_len, page * draw(st.integers(2, 4)))
    seqs = draw(st.integers(2, min(8, space.max_seqs)))
    cfg = BudgetConfig(max_num_batched_tokens=max(seqs * (1 + k), draw(st.sampled_from((page, 2 * page, model_len)))),
                       max_num_seqs=seqs, num_speculative_tokens=k, method=method, block_size=page,
                       num_kv_blocks=MAX_POOL, max_model_len=model_len, enable_prefix_caching=draw(st.booleans()))
    return cfg.replace(num_kv_blocks=least_pool(policy, cfg)) if validates(policy, cfg) else cfg
