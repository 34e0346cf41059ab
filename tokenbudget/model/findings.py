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
from .policy import BudgetPolicy
from .registry import get_policy
from .replay import replay_on_model


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
def _self_preemption_stalls(cfg: BudgetConfig, run: RunRecord) -> bool:
    """Under priority scheduling, a step preempts and grants nothing although requests it
    did not preempt are still running."""
    return cfg.scheduling_policy == "priority" and any(
        rec.preempted and rec.total_scheduled_tokens == 0 and set(rec.running) - set(rec.preempted)
        for rec in run.steps)


def _priority(policy: BudgetPolicy, cfg: BudgetConfig) -> bool:
    return cfg.scheduling_policy == "priority"


# -- F4 -----------------------------------------------------------------------------------
def _padding_over_room(cfg: BudgetConfig, run: RunRecord) -> bool:
    """An empty batch grants nothing although a waiting request could take a token, and a
    padded admission (1 + k rows) is more than a waiting request may take, min(T, B - d)."""
    return any(_idle(rec) and not rec.running and rec.progress_possible
               and 1 + rec.limits.num_speculative_tokens > _admission_room(rec) for rec in run.steps)


def _room_below_padding(policy: BudgetPolicy, cfg: BudgetConfig) -> bool:
    p = policy.params(cfg)
    room = min(int(policy.token_cap(p)), cfg.max_num_batched_tokens - int(p.draft_slots))
    return room < 1 + cfg.num_speculative_tokens


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


FINDINGS: dict[str, Finding] = {f.id: f for f in (
    Finding("F1", "vllm", ("0.32", "0.33"), "spec-shape", "tokenbudget/spec/SPEC.md §6 F1",
            "f1-vllm-adaptive-padded-threshold.json",
            "a padded admission cut by long_prefill_token_threshold: vLLM's schedule() raises AssertionError "
            "(pad_spec_decode needs 1 + k rows); the model reports spec-shape for the same step",
            True, _threshold_cuts_padding, _threshold_at_most_k),
    Finding("F2", "vllm", ("0.32", "0.33"), "progress", "tokenbudget/spec/SPEC.md §6 F2",
            "f2-vllm-adaptive-unchunked-draft-slots.json",
            "chunked prefill off: a waiting request longer than min(T, B - d) is never scheduled, nor is any "
            "request behind it under FCFS",
            False, _unchunked_head_too_long, _unchunked),
    Finding("F3", "vllm", ("0.32",), "progress", "tokenbudget/spec/SPEC.md §6 F3",
            "f3-vllm-adaptive-priority-self-preemption.json",
            "under priority scheduling a request that preempts itself ends the step, which grants nothing",
            False, _self_preemption_stalls, _priority),
    Finding("F4", "vllm", ("0.32", "0.33"), "progress", "tokenbudget/spec/SPEC.md §6 F4",
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
