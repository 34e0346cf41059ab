"""The rare paths of a scheduling step that a fuzz run should reach, read off each
StepRecord: a campaign counts the steps that took each one.

A path the fuzzer never takes is a path it never tested; the counts say which.
"""
from __future__ import annotations

from typing import Callable

from ..model import BudgetConfig
from ..spec.records import StepRecord


def _same_step_refund(rec: StepRecord, cfg: BudgetConfig) -> bool:
    return any(entry.kind == "refund" for entry in rec.ledger or ())


def _padded_admission(rec: StepRecord, cfg: BudgetConfig) -> bool:
    return bool(rec.padded)


def _threshold_cut(rec: StepRecord, cfg: BudgetConfig) -> bool:
    """A prefill chunk cut to long_prefill_token_threshold while more of its prompt was left."""
    cut = cfg.long_prefill_token_threshold
    return cut > 0 and any(rec.num_scheduled_tokens.get(rid) == cut and
                           rec.computed_before[rid] + cut < rec.num_tokens[rid] for rid in rec.prefill)


def _priority_preemption(rec: StepRecord, cfg: BudgetConfig) -> bool:
    return cfg.scheduling_policy == "priority" and bool(rec.preempted)


def _kv_pressure(rec: StepRecord, cfg: BudgetConfig) -> bool:
    """The KV pool was full after the pass, or the pass preempted for room."""
    return rec.kv_blocks_in_use >= rec.limits.num_kv_blocks or bool(rec.preempted)


def _model_len_clip(rec: StepRecord, cfg: BudgetConfig) -> bool:
    """A grant that reaches max_model_len (its one sampled token included)."""
    return any(rec.computed_before[rid] + grant + 1 >= rec.limits.max_model_len
               for rid, grant in rec.num_scheduled_tokens.items())


PATHS: dict[str, Callable[[StepRecord, BudgetConfig], bool]] = {
    "same-step-refund": _same_step_refund,
    "padded-admission": _padded_admission,
    "threshold-cut": _threshold_cut,
    "priority-preemption": _priority_preemption,
    "kv-pressure": _kv_pressure,
    "max-model-len": _model_len_clip,
}


def paths_taken(rec: StepRecord, cfg: BudgetConfig) -> list[str]:
    """The rare paths this step took, in PATHS order."""
    return [name for name, took in PATHS.items() if took(rec, cfg)]
