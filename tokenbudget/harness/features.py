"""Which scheduler features a run exercised, read from the model's StepRecords.

Conformance reports, per feature, how many workloads exercised it, so an agreement rate
comes with evidence of what was compared. Features are named after the vLLM mechanism.
"""
from __future__ import annotations

from ..model import BudgetConfig
from ..spec.records import StepRecord

FEATURES = (
    "chunked-prefill", "unchunked-prefill", "prefix-hit", "padding", "long-prefill-threshold", "token-cap-below-B",
    "preemption", "same-step-refund", "max-model-len", "drafts", "fcfs", "priority", "async", "sync",
)


def config_features(cfg: BudgetConfig) -> set[str]:
    """Features a config switches on: scheduling policy, async or sync, unchunked prefill, T < B,
    the method."""
    out = {cfg.scheduling_policy, "async" if cfg.async_scheduling else "sync"}
    if not cfg.enable_chunked_prefill:
        out.add("unchunked-prefill")
    if cfg.max_num_scheduled_tokens is not None and cfg.max_num_scheduled_tokens < cfg.max_num_batched_tokens:
        out.add("token-cap-below-B")
    if cfg.method is not None:
        out.add(f"method:{cfg.method}{'+parallel' if cfg.parallel_drafting else ''}")
    return out


def step_features(rec: StepRecord, threshold: int, running_before: frozenset[str]) -> set[str]:
    """Features one step exercised; ``running_before`` is the running queue after the previous step."""
    out: set[str] = set()
    for rid, grant in rec.num_scheduled_tokens.items():
        before, total = rec.computed_before[rid], rec.num_tokens[rid]
        if before + grant < total:
            out.add("chunked-prefill")
            if grant == threshold:
                out.add("long-prefill-threshold")
        if before > 0 and rid not in running_before:
            out.add("prefix-hit")
        if before + grant + 1 >= rec.limits.max_model_len:
            out.add("max-model-len")
        if rec.scheduled_draft_tokens.get(rid, 0) and rid not in rec.padded:
            out.add("drafts")
    if rec.padded:
        out.add("padding")
    if rec.preempted:
        out.add("preemption")
    if any(e.kind == "refund" for e in rec.ledger or ()):
        out.add("same-step-refund")
    return out
