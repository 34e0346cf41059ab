"""The documented ways in which the model (``trtllm``) and TensorRT-LLM's scheduler.py at 002f3cc3
disagree. Conformance attaches the first matching entry to a divergence; one that matches none is
unexplained and fails the run. Each is a finding about TensorRT-LLM (SPEC.md §9, its trace written
by ``conform``), never a simplification explained away.

Both findings are a capacity scheduler counting fewer KV blocks than ``prepare_resources`` then
adds: ``num_extra_kv_tokens`` at a first chunk, ``1 + drafts`` tokens at each generation step, past
prompt + max_new_tokens in a request's last steps. The C++ KV manager throws ("Can't allocate new
blocks") where the model, whose pool is the same size, preempts or has room. A throw without
speculation (no drafts, no drafter's slots) matches neither.
"""
from __future__ import annotations

from typing import Callable

from ...model.trtllm.deployments import GUARANTEED_NO_EVICT, MAX_UTILIZATION, capacity_of
from ..known_divergences import KnownDivergence
from ..lockstep import Lockstep

OUT_OF_BLOCKS = "OutOfBlocks"


def _speculative_kv(result: Lockstep) -> bool:
    """The step ran with KV past what the capacity policies count: drafts or the drafter's slots."""
    run = result.model_run
    return run is not None and run.limits.num_speculative_tokens + run.limits.lookahead > 0


def _raised_past_the_count(capacity: str) -> Callable[[Lockstep], bool]:
    def matches(result: Lockstep) -> bool:
        if result.engine is None or result.config is None or capacity_of(result.config.engine_version) != capacity:
            return False
        return (result.engine.error or "").startswith(OUT_OF_BLOCKS) and _speculative_kv(result)
    return matches


def _stale_drafts(result: Lockstep) -> bool:
    """The step differs only in grants, drafts, finished requests or blocks, and re-prefills a request
    paused earlier that the engine gives drafts (or, at its first chunk, their KV): what the stamp left on it."""
    run, engine = result.model_run, result.engine
    if run is None or engine is None or engine.error is not None or not run.steps:
        return False
    if not set(result.fields) <= {"num_scheduled_tokens", "scheduled_draft_tokens", "kv_blocks_in_use", "finished"}:
        return False
    paused = {rid for record in run.steps[:-1] for rid in record.preempted}
    refilled = paused & run.steps[-1].prefill
    return bool(refilled) and (bool(refilled & set(engine.scheduled_draft_tokens))
                               or "scheduled_draft_tokens" not in result.fields)


KNOWN: tuple[KnownDivergence, ...] = (
    KnownDivergence(
        "T1", "finding", "tokenbudget/spec/SPEC.md §9 T1",
        "GUARANTEED_NO_EVICT reserves prompt + max_new_tokens blocks to completion (getRemainingBlocksToCompletion), "
        "not the num_extra_kv_tokens and drafts past them that prepare_resources adds: the KV manager runs out",
        _raised_past_the_count(GUARANTEED_NO_EVICT)),
    KnownDivergence(
        "T2", "finding", "tokenbudget/spec/SPEC.md §9 T2",
        "MAX_UTILIZATION's one-step need (getNeededBlocksOneStep) counts a first chunk's prompt without "
        "num_extra_kv_tokens and caps a generation request's 1 + drafts at max_new_tokens, while prepare_resources "
        "adds them: the KV manager runs out",
        _raised_past_the_count(MAX_UTILIZATION)),
    KnownDivergence(
        "T3", "finding", "tokenbudget/spec/SPEC.md §9 T3",
        "a paused request keeps the placeholder drafts stamped on it (LlmRequest::pause leaves mDraftTokens): its "
        "recomputed context takes their KV at the first chunk and carries them, charged, on its last chunk",
        _stale_drafts),
)


def explain(result: Lockstep) -> KnownDivergence | None:
    """The documented divergence this lockstep result shows, or None."""
    return next((k for k in KNOWN if k.matches(result)), None)
