"""The findings table: what the modelled engines' own loops do wrong (SPEC.md §6)."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator, Mapping

from ..spec.corpus import FINDINGS_DIR
from ..spec.grant_rules import kv_slots_needed
from ..spec.records import RequestState, RunRecord, StepRecord
from ..spec.trace import Trace
from .config import BudgetConfig, ConfigError
from .fastdeploy.commits import commit_row
from .trtllm.deployments import DEPLOYMENTS, GUARANTEED_NO_EVICT, MAX_UTILIZATION, capacity_of
from .policy import BudgetPolicy
from .registry import get_policy
from .replay import replay_on_model
from .vllm.async_loop import worker_keeps_drafts


@dataclass(frozen=True)
class Finding:
    id: str
    engine: str
    affects_versions: tuple[str, ...]  # the modelled versions that have it
    invariant: str
    spec: str  # where SPEC.md explains it
    trace: str  # its trace under tokenbudget/corpus/findings/
    summary: str
    engine_raises: bool  # the real engine raises in the step; otherwise it agrees with the model
    shows: Callable[[BudgetConfig, RunRecord], bool]
    opens: Callable[[BudgetPolicy, BudgetConfig], bool]

    @property
    def trace_path(self) -> Path:
        return FINDINGS_DIR / self.trace


def _states(run: RunRecord) -> Iterator[tuple[StepRecord, Mapping[str, RequestState]]]:
    """Each step with every request's state before it (as added, then as last reported).
    The map is one dict updated in place: read it before asking for the next step."""
    states = dict(run.added)
    for index, rec in enumerate(run.steps):
        yield rec, states
        if index < len(run.outcomes):
            states.update(run.outcomes[index].requests)


def _admission_room(rec: StepRecord) -> int:
    """The most tokens a waiting request can get from an empty batch: min(T, B - d)."""
    lim = rec.limits
    return min(lim.max_num_scheduled_tokens, lim.max_num_batched_tokens - lim.draft_slots)


def _idle(rec: StepRecord) -> bool:
    return rec.total_scheduled_tokens == 0 and bool(rec.waiting)


# -- F1 -----------------------------------------------------------------------------------
def _threshold_cuts_padding(cfg: BudgetConfig, run: RunRecord) -> bool:
    """A padded admission granted the threshold t < 1 + k rows."""
    t = cfg.long_prefill_token_threshold
    return t > 0 and any(rec.num_scheduled_tokens[rid] == t < 1 + rec.limits.num_speculative_tokens
                         for rec in run.steps for rid in rec.padded)


def _threshold_at_most_k(policy: BudgetPolicy, cfg: BudgetConfig) -> bool:
    return 0 < cfg.long_prefill_token_threshold <= cfg.num_speculative_tokens


# -- F2 -----------------------------------------------------------------------------------
def _unchunked_head_too_long(cfg: BudgetConfig, run: RunRecord) -> bool:
    """Chunked prefill off, a step grants nothing, and the head of the waiting queue needs
    more tokens than a waiting request may take, min(T, B - d)."""
    if cfg.enable_chunked_prefill:
        return False
    for rec, states in _states(run):
        if _idle(rec):
            head = states[rec.waiting[0]]
            if head.num_prompt_tokens + head.num_output_tokens - head.num_computed_tokens > _admission_room(rec):
                return True
    return False


def _unchunked(policy: BudgetPolicy, cfg: BudgetConfig) -> bool:
    return not cfg.enable_chunked_prefill


# -- F3 -----------------------------------------------------------------------------------
def _grants_nothing_while_others_run(rec: StepRecord) -> bool:
    """The step grants nothing although requests it did not preempt are still running."""
    return rec.total_scheduled_tokens == 0 and bool(set(rec.running) - set(rec.preempted))


def preempts_past_the_running(rec: StepRecord) -> bool:
    """The step preempts, and grants nothing while requests it did not preempt are still running."""
    return bool(rec.preempted) and _grants_nothing_while_others_run(rec)


def _self_preemption_stalls(cfg: BudgetConfig, run: RunRecord) -> bool:
    """Under priority scheduling, a step that preempts past the running (above)."""
    return cfg.scheduling_policy == "priority" and any(preempts_past_the_running(rec) for rec in run.steps)


def _priority(policy: BudgetPolicy, cfg: BudgetConfig) -> bool:
    return cfg.scheduling_policy == "priority"


# -- F4 -----------------------------------------------------------------------------------
def _padding_over_room(cfg: BudgetConfig, run: RunRecord) -> bool:
    """An empty batch grants nothing although a waiting request could take a token, and a
    padded admission (1 + k rows) is more than a waiting request may take, min(T, B - d),
    which an unpadded one would fit (at least 1: vLLM asks T >= 1 and B > d)."""
    return any(_idle(rec) and not rec.running and rec.progress_possible
               and 1 <= _admission_room(rec) < 1 + rec.limits.num_speculative_tokens for rec in run.steps)


def _room_below_padding(policy: BudgetPolicy, cfg: BudgetConfig) -> bool:
    p = policy.params(cfg)
    room = min(int(policy.token_cap(p)), cfg.max_num_batched_tokens - int(p.draft_slots))
    return 1 <= room < 1 + cfg.num_speculative_tokens


# -- F5 -----------------------------------------------------------------------------------
def _every_seat_decoding_budget_spent(cfg: BudgetConfig, run: RunRecord) -> bool:
    """A step whose budget starts at <= 0 with all max_num_seqs seats running: the loop
    visits nobody and grants nothing, and every running decode is paused."""
    return any(rec.initial_token_budget is not None and rec.initial_token_budget <= 0
               and rec.total_scheduled_tokens == 0 and len(rec.running) == rec.limits.max_num_seqs
               and rec.paused == frozenset(rec.running) for rec in run.steps)


def _full_decode_batch_spends_budget(policy: BudgetPolicy, cfg: BudgetConfig) -> bool:
    """The policy accepts cfg, and a pass that starts with max_num_seqs decodes has a budget <= 0."""
    try:
        policy.validate(cfg)
    except ConfigError:
        return False
    return int(policy.initial_budgets(policy.params(cfg), cfg.max_num_seqs).token) <= 0


# -- F6 -----------------------------------------------------------------------------------
def _reach(cfg: BudgetConfig) -> int:
    """What SGLang's spec-v1 page check (after PR #14180) adds to a sequence length:
    thresh = num_draft_tokens + topk * steps = (1 + k) + k."""
    return 1 + 2 * cfg.num_speculative_tokens


def _decode_from_a_full_page_short(cfg: BudgetConfig, run: RunRecord) -> bool:
    """A step with a decode (a grant with drafts) whose KV ended exactly on a page boundary
    before it, for which the check counted no page, and a decode that holds less KV than its
    verify writes: the uncounted one, or another whose page it took (which one runs short
    is the allocation's order)."""
    page = cfg.block_size
    if page <= _reach(cfg) + 1:
        return False
    for rec in run.steps:
        lim = rec.limits
        uncounted, short = False, False
        for rid, drafts in rec.scheduled_draft_tokens.items():
            if not drafts:
                continue
            computed = rec.computed_before[rid]
            uncounted |= bool(computed) and computed % page == 0
            need = kv_slots_needed(computed, rec.num_scheduled_tokens[rid], lim.lookahead, lim.max_model_len)
            short |= len(rec.block_tables.get(rid, ())) * page < need
        if uncounted and short:
            return True
    return False


def _pages_past_the_reach(policy: BudgetPolicy, cfg: BudgetConfig) -> bool:
    """The check skips the residue seqlen % page == 1 only where page > thresh + 1."""
    return cfg.block_size > _reach(cfg) + 1


# -- F9 -----------------------------------------------------------------------------------
def _async_speculating(policy: BudgetPolicy, cfg: BudgetConfig) -> bool:
    return cfg.async_scheduling and cfg.num_speculative_tokens > 0


def _stale_placeholders_scheduled(cfg: BudgetConfig, run: RunRecord) -> bool:
    """A request scheduled with placeholder drafts made for an earlier step."""
    return any(rec.stale_drafts for rec in run.steps)


def _async_on_the_v1_runner(policy: BudgetPolicy, cfg: BudgetConfig) -> bool:
    """Async scheduling with drafts, on a release and method that run the V1 model runner."""
    return _async_speculating(policy, cfg) and not worker_keeps_drafts(cfg.engine_version, cfg.method,
                                                                       cfg.parallel_drafting)


# -- F10 ----------------------------------------------------------------------------------
def grants_nothing_beside_held_back_requests(rec: StepRecord) -> bool:
    """A step that grants nothing, though a request could take a token, while requests it
    did not preempt stay running (under async: held back by their tokens in flight)."""
    return bool(rec.progress_possible) and _grants_nothing_while_others_run(rec)


def _held_back_requests_waste_a_step(cfg: BudgetConfig, run: RunRecord) -> bool:
    return cfg.async_scheduling and any(grants_nothing_beside_held_back_requests(rec) for rec in run.steps)


# -- F8 -----------------------------------------------------------------------------------
def _decode_reserves_past_the_row(cfg: BudgetConfig, run: RunRecord) -> bool:
    """A decode at page 1 that holds more KV positions than its req_to_token row."""
    return cfg.block_size == 1 and any(
        len(rec.block_tables.get(rid, ())) > rec.limits.max_model_len + rec.limits.context_headroom
        for rec in run.steps for rid in rec.scheduled_draft_tokens)


def _page_one_long_drafts(policy: BudgetPolicy, cfg: BudgetConfig) -> bool:
    """Page 1 and 2(1 + k) past a KV that may end 4 short of the context: k >= 8."""
    return cfg.block_size == 1 and cfg.num_speculative_tokens >= 8


# -- F7 -----------------------------------------------------------------------------------
def _lone_chunk_refused_for_its_own_reserve(cfg: BudgetConfig, run: RunRecord) -> bool:
    """A step that grants nothing while the one running request is part-way through its
    prompt and the free blocks hold its next chunk's blocks and the method's spare block:
    only its own future reservation, counted over the running list it belongs to, refuses it."""
    block, spare = cfg.block_size, 1 if cfg.num_speculative_tokens else 0
    for rec, states in _states(run):
        if rec.total_scheduled_tokens or len(rec.running) != 1 or rec.initial_token_budget is None:
            continue
        rid = rec.running[0]
        state = states.get(rid)
        if state is None or state.num_computed_tokens >= state.num_prompt_tokens:
            continue
        chunk = min(state.num_prompt_tokens - state.num_computed_tokens, int(rec.initial_token_budget))
        held = len(rec.block_tables.get(rid, ()))
        blocks = max(0, -(-(state.num_computed_tokens + chunk) // block) - held) + spare
        if chunk > 0 and cfg.num_kv_blocks - rec.kv_blocks_in_use >= blocks + spare:
            return True
    return False


def _token_ratio_reserve(policy: BudgetPolicy, cfg: BudgetConfig) -> bool:
    """The commit reserves each running request's future by the new-token ratio (#7498)."""
    row = commit_row(getattr(cfg, "engine_version", None))
    return row is not None and row.token_ratio_reserve


# -- T1, T2, T3 (TensorRT-LLM) ------------------------------------------------------------
def _capacity(cfg: BudgetConfig) -> str | None:
    """The TensorRT-LLM capacity policy cfg's deployment names (the default's without one), or None."""
    version = getattr(cfg, "engine_version", None)
    return capacity_of(version) if version is None or version in DEPLOYMENTS else None


def _kv_manager_threw_under(capacity: str) -> Callable[[BudgetConfig, RunRecord], bool]:
    """A step under ``capacity`` where the KV manager had no block for the tokens the executor adds
    (the loop's OutOfBlocks)."""
    def shows(cfg: BudgetConfig, run: RunRecord) -> bool:
        return _capacity(cfg) == capacity and any((rec.error or "").startswith("OutOfBlocks") for rec in run.steps)
    return shows


def _speculating_under(capacity: str) -> Callable[[BudgetPolicy, BudgetConfig], bool]:
    """TensorRT-LLM's loop under ``capacity`` with drafts: tokens past what the capacity policy counts."""
    def opens(policy: BudgetPolicy, cfg: BudgetConfig) -> bool:
        return (getattr(policy, "engine", None) == "tensorrt-llm" and cfg.num_speculative_tokens > 0
                and _capacity(cfg) == capacity)
    return opens


def _paused_request_runs_placeholders(cfg: BudgetConfig, run: RunRecord) -> bool:
    """A prefill chunk that runs drafts, of a request paused before it."""
    paused: set[str] = set()
    for rec in run.steps:
        if any(drafts and rid in rec.prefill and rid in paused for rid, drafts in rec.scheduled_draft_tokens.items()):
            return True
        paused.update(rec.preempted)
    return False


def _pauses_stamped_requests(policy: BudgetPolicy, cfg: BudgetConfig) -> bool:
    """MAX_UTILIZATION pauses generation requests that carry stamped placeholder drafts."""
    return (_speculating_under(MAX_UTILIZATION)(policy, cfg)
            and int(policy.scheduled_drafts(policy.params(cfg))) > 0)


FINDINGS: dict[str, Finding] = {f.id: f for f in (
    Finding("F1", "vllm", ("0.32", "0.33", "0.34"), "spec-shape", "tokenbudget/spec/SPEC.md §6 F1",
            "f1-vllm-adaptive-padded-threshold.json",
            "a padded admission cut by long_prefill_token_threshold: vLLM's schedule() raises AssertionError "
            "(pad_spec_decode needs 1 + k rows); the model reports spec-shape for the same step",
            True, _threshold_cuts_padding, _threshold_at_most_k),
    Finding("F2", "vllm", ("0.32", "0.33", "0.34"), "progress", "tokenbudget/spec/SPEC.md §6 F2",
            "f2-vllm-adaptive-unchunked-draft-slots.json",
            "chunked prefill off: a waiting request longer than min(T, B - d) is never scheduled, nor is any "
            "request behind it under FCFS",
            False, _unchunked_head_too_long, _unchunked),
    Finding("F3", "vllm", ("0.32",), "progress", "tokenbudget/spec/SPEC.md §6 F3",
            "f3-vllm-adaptive-priority-self-preemption.json",
            "under priority scheduling a request that preempts itself ends the step, which grants nothing",
            False, _self_preemption_stalls, _priority),
    Finding("F4", "vllm", ("0.32", "0.33", "0.34"), "progress", "tokenbudget/spec/SPEC.md §6 F4",
            "f4-vllm-adaptive-padded-admission-over-budget.json",
            "a padded admission of 1 + k rows larger than min(T, B - d) is never scheduled",
            False, _padding_over_room, _room_below_padding),
    Finding("F5", "fastdeploy", ("PR #7499", "PR #7623", "b19754c5f", "2a606e361", "564c78d78"), "progress", "tokenbudget/spec/SPEC.md §6 F5",
            "f5-fastdeploy-spec-method-full-batch-deadlock.json",
            "B = S * t (the startup check allows it): once all S seats decode the budget starts at 0, the loop "
            "visits nobody, no decode gets a block, each pauses at its block boundary and none ever finishes",
            False, _every_seat_decoding_budget_spent, _full_decode_batch_spends_budget),
    Finding("F6", "sglang", ("before PR #14939", "PR #14939"), "kv-capacity", "tokenbudget/spec/SPEC.md §6 F6",
            "f6-sglang-v1-full-page-uncounted.json",
            "spec v1 with pages larger than thresh + 1 (thresh = 1 + 2k): the decode check after PR #14180 counts "
            "a request only when (seqlen + thresh) % page <= thresh, which skips seqlen % page == 1, a KV that "
            "ends exactly on a page; a batch of such requests passes the check with no page free and the "
            "verify runs out of KV",
            False, _decode_from_a_full_page_short, _pages_past_the_reach),
    Finding("F7", "fastdeploy", ("564c78d78",), "progress", "tokenbudget/spec/SPEC.md §6 F7",
            "f7-fastdeploy-564c78d78-lone-chunk-own-reserve.json",
            "FD_USE_NEW_TOKEN_RATIO_RESERVE: a running prefill chunk must fit its blocks plus the reserve of every "
            "running request, itself included; a lone request whose prompt passes the budget, on a pool that holds "
            "it but not its own reserve, is refused every step, and the ratio decays only in a step that schedules",
            False, _lone_chunk_refused_for_its_own_reserve, _token_ratio_reserve),
    Finding("F8", "sglang", ("0.5.23",), "model-len", "tokenbudget/spec/SPEC.md §6 F8",
            "f8-sglang-0.5.23-page-one-row-overflow.json",
            "page 1 and k >= 8: a decode reserves its committed KV + 2(1 + k) positions, where the req_to_token row "
            "holds max_model_len + 4 + (1 + k); at the last decode of a request (KV at max_model_len - 4) the "
            "reservation passes the row",
            True, _decode_reserves_past_the_row, _page_one_long_drafts),
    Finding("F9", "vllm", ("0.32", "0.33"), "placeholder-fresh", "tokenbudget/spec/SPEC.md §6 F9",
            "f9-vllm-async-stale-placeholder-drafts.json",
            "async scheduling on the V1 model runner (parallel-drafting EAGLE, suffix, medusa, mlp_speculator): a "
            "running request the token budget leaves out keeps the -1 placeholder drafts of its last pass, and a "
            "later pass schedules them; the runner fills placeholders only for the batch before, so k budget "
            "tokens go to drafts no drafter proposed (clamped to token 0) and never accepted",
            False, _stale_placeholders_scheduled, _async_on_the_v1_runner),
    Finding("F10", "vllm", ("0.32", "0.33", "0.34"), "progress", "tokenbudget/spec/SPEC.md §6 F10",
            "f10-vllm-async-tail-preempted-behind-tokens-in-flight.json",
            "async: requests skipped for their tokens in flight keep their KV; a decode's 1 + k placeholder drafts, "
            "or an admission's chunk with its lookahead, do not fit what is left (the pass never cuts a grant to "
            "the free KV), the decode preempting itself as the running queue's tail: the step grants nothing "
            "although a token fit",
            False, _held_back_requests_waste_a_step, _async_speculating),
    Finding("T1", "tensorrt-llm", ("PR #16101", "before PR #16101", "002f3cc3/guaranteed-no-evict"), "model-error",
            "tokenbudget/spec/SPEC.md §9 T1",
            "t1-trtllm-guaranteed-no-evict-drafts-past-reservation.json",
            "GUARANTEED_NO_EVICT reserves prompt + max_new_tokens blocks to completion "
            "(getRemainingBlocksToCompletion), not the num_extra_kv_tokens and drafts past them that "
            "prepare_resources adds: the KV manager runs out",
            True, _kv_manager_threw_under(GUARANTEED_NO_EVICT), _speculating_under(GUARANTEED_NO_EVICT)),
    Finding("T2", "tensorrt-llm", ("PR #16101", "before PR #16101", "002f3cc3/max-utilization"), "model-error",
            "tokenbudget/spec/SPEC.md §9 T2",
            "t2-trtllm-max-utilization-one-step-undercount.json",
            "MAX_UTILIZATION's one-step need (getNeededBlocksOneStep) counts a first chunk's prompt without "
            "num_extra_kv_tokens and caps a generation request's 1 + drafts at max_new_tokens, while "
            "prepare_resources adds them: the KV manager runs out",
            True, _kv_manager_threw_under(MAX_UTILIZATION), _speculating_under(MAX_UTILIZATION)),
    Finding("T3", "tensorrt-llm", ("PR #16101", "before PR #16101", "002f3cc3/max-utilization"), "spec-shape",
            "tokenbudget/spec/SPEC.md §9 T3",
            "t3-trtllm-max-utilization-paused-placeholder-drafts.json",
            "a paused request keeps the placeholder drafts stamped on it (LlmRequest::pause leaves mDraftTokens): its "
            "recomputed context takes their KV at the first chunk and runs them, placeholders, with its last chunk",
            False, _paused_request_runs_placeholders, _pauses_stamped_requests),
)}


def findings_of(engine: str | None, version: str | None = None) -> tuple[Finding, ...]:
    """The findings about the loop of ``engine`` (none for None) that affect ``version``
    (every version when None)."""
    return tuple(f for f in FINDINGS.values() if f.engine == engine and (version is None or version in f.affects_versions))


def shown_finding(engine: str | None, invariant: str, cfg: BudgetConfig, run: RunRecord,
                  version: str | None = None) -> Finding | None:
    """The finding about ``engine``'s loop at ``version`` that breaks ``invariant`` and whose
    mechanism the run shows, or None."""
    return next((f for f in findings_of(engine, version) if f.invariant == invariant and f.shows(cfg, run)), None)


def explaining_finding(trace: Trace, invariant: str, policy: str | BudgetPolicy | None = None) -> Finding | None:
    """The finding that explains ``invariant`` in the trace's run on the model under
    ``policy`` (default: the trace's), or None. Raises BadInput as ``replay_on_model``."""
    resolved = policy if isinstance(policy, BudgetPolicy) else get_policy(policy or trace.policy)
    engine = getattr(resolved, "engine", None)  # a user policy need not name one
    cfg = BudgetConfig.from_dict(trace.config)
    version = resolved.engine_version(cfg)
    if not any(f.invariant == invariant and f.opens(resolved, cfg) for f in findings_of(engine, version)):
        return None
    result = replay_on_model(trace, resolved)
    if result.run is None:
        return None
    return shown_finding(engine, invariant, cfg, result.run, version)
