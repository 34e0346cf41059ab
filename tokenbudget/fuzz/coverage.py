"""The rare paths of a scheduling step that a fuzz run should reach, read off each
StepRecord: a campaign counts the steps that took each one.

A path the fuzzer never takes is a path it never tested; the counts say which. Each is
read off what every target's record shows; a real engine's target that runs the model
beside it is counted on the model's record of the same step while the two agree (it has
the ledger a same-step refund needs). ``example_key`` counts the examples that took a path.
"""
from __future__ import annotations

from typing import Callable, Mapping

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


def _input_budget_stop(rec: StepRecord, cfg: BudgetConfig) -> bool:
    """The running loop stopped on the input budget (B less the step's runner rows is at most
    d) with token budget left, ahead of a running request it left unscheduled."""
    lim = rec.limits
    return (lim.max_num_batched_tokens - rec.total_runner_rows <= lim.draft_slots
            and rec.total_scheduled_tokens < lim.max_num_scheduled_tokens
            and any(rid not in rec.num_scheduled_tokens and rid not in rec.paused for rid in rec.running))


PATHS: dict[str, Callable[[StepRecord, BudgetConfig], bool]] = {
    "same-step-refund": _same_step_refund,
    "input-budget-stop": _input_budget_stop,
    "padded-admission": _padded_admission,
    "threshold-cut": _threshold_cut,
    "priority-preemption": _priority_preemption,
    "kv-pressure": _kv_pressure,
    "max-model-len": _model_len_clip,
}


def paths_taken(rec: StepRecord, cfg: BudgetConfig) -> list[str]:
    """The rare paths this step took, in PATHS order."""
    return [name for name, took in PATHS.items() if took(rec, cfg)]


def example_key(path: str) -> str:
    """The coverage key that counts the examples (not the steps) that took ``path``."""
    return f"{path} (examples)"


def steps_per_path(coverage: Mapping[str, int]) -> dict[str, int]:
    """The step counts of a coverage Counter, without its example counts."""
    return {path: n for path, n in coverage.items() if path in PATHS}


def examples_per_path(coverage: Mapping[str, int]) -> dict[str, int]:
    """The example counts of a coverage Counter, by path."""
    return {path: coverage.get(example_key(path), 0) for path in PATHS if example_key(path) in coverage}

