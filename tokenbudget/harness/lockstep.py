"""Run one trace on the reference model and on a real engine in lockstep, step by step.

Both sides get the same ops. After every step op the observable part of the step
(``StepView``: grants, scheduled drafts, preemptions in order, finished requests, KV pages
in use after the pass) is compared; the run stops at the first step that differs, at the first step where the
engine raised, or when the ops end. Nothing here writes files, knows about workloads or names an engine.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Mapping

from ..model import BudgetConfig, BudgetPolicy, get_policy
from ..spec import check_step
from ..spec.execution import Execution
from ..spec.target import Target
from ..spec.records import RunRecord, StepOutcome, StepRecord
from ..spec.trace import AbortOp, AddOp, StepOp, Trace
from .features import config_features, step_features
from ..model.target import ModelTarget

COMPARED = ("num_scheduled_tokens", "scheduled_draft_tokens", "preempted", "finished", "kv_blocks_in_use")


@dataclass(frozen=True)
class StepView:
    """What both sides expose of one step. ``scheduled_draft_tokens`` lists only requests
    with at least one draft; ``preempted`` is in preemption order; ``kv_blocks_in_use`` the
    record's: the KV blocks not free after the pass, before its output (vLLM counts a cached
    free block as free, SGLang's radix tree holds its pages); ``error`` is an exception raised
    inside the side's scheduler (the record's ``error``);
    ``violations`` are the invariant ids the model's StepRecord breaks (model side only)."""

    num_scheduled_tokens: Mapping[str, int]
    scheduled_draft_tokens: Mapping[str, int]
    preempted: tuple[str, ...]
    finished: frozenset[str]
    kv_blocks_in_use: int = 0
    error: str | None = None
    violations: tuple[str, ...] = ()

    def differs_in(self, other: StepView) -> tuple[str, ...]:
        """The compared fields on which the two views differ."""
        return tuple(f for f in COMPARED if getattr(self, f) != getattr(other, f))

    def to_json(self) -> dict[str, object]:
        doc: dict[str, object] = {
            "num_scheduled_tokens": dict(self.num_scheduled_tokens),
            "scheduled_draft_tokens": dict(self.scheduled_draft_tokens),
            "preempted": list(self.preempted),
            "finished": sorted(self.finished),
            "kv_blocks_in_use": self.kv_blocks_in_use,
        }
        if self.error is not None:
            doc["error"] = self.error
        if self.violations:
            doc["violations"] = list(self.violations)
        return doc


@dataclass(frozen=True)
class Lockstep:
    """The outcome of one lockstep run.

    ``steps_agreeing`` counts the steps whose views were equal; ``features`` are the
    scheduler features the model's side exercised (``fuzz.coverage``). ``step`` is the index
    (counting step ops) of the step that ended the run early, None when every step
    agreed. ``engine`` is the real engine's side. ``fields`` are the compared fields that differ
    there; empty when the engine raised (``engine.error``), in which case the model side's ``violations`` say whether the model
    flagged that step as well. ``config`` and ``model_run`` are the run's config and the
    model side's observations, up to that step; ``trace`` the trace run.
    """

    steps_agreeing: int
    features: frozenset[str]
    step: int | None = None
    fields: tuple[str, ...] = ()
    model: StepView | None = None
    engine: StepView | None = None
    config: BudgetConfig | None = field(default=None, compare=False)
    model_run: RunRecord | None = field(default=None, repr=False, compare=False)
    trace: Trace | None = field(default=None, repr=False, compare=False)  # the trace run

    @property
    def agrees(self) -> bool:
        return self.step is None

    @property
    def engine_raised(self) -> bool:
        return self.engine is not None and self.engine.error is not None

    @property
    def predicted_failure(self) -> bool:
        """The engine raised in a step where the model reports a safety violation."""
        return self.engine_raised and self.model is not None and bool(self.model.violations)


def view(record: StepRecord, outcome: StepOutcome, violations: tuple[str, ...] = ()) -> StepView:
    finished = frozenset(rid for rid in record.num_scheduled_tokens
                         if rid in outcome.requests and outcome.requests[rid].status == "finished")
    return StepView(
        num_scheduled_tokens=dict(record.num_scheduled_tokens),
        scheduled_draft_tokens={rid: n for rid, n in record.scheduled_draft_tokens.items() if n},
        preempted=tuple(record.preempted),
        finished=finished,
        kv_blocks_in_use=record.kv_blocks_in_use,
        error=record.error,
        violations=violations,
    )


EngineFactory = Callable[[BudgetConfig, BudgetPolicy], Target]


def run_lockstep(trace: Trace, engine: EngineFactory, cfg: BudgetConfig | None = None) -> Lockstep:
    """Run the trace's ops on the model (``ModelTarget``) and on a real engine's target,
    ``engine(cfg, policy)``, both under ``cfg`` (default: the trace's config as it is).
    Compare every step.

    Raises EngineUnavailable without the engine, ConfigError when a side refuses the config,
    ValueError when a side refuses a request.
    """
    policy = get_policy(trace.policy)
    cfg = cfg or BudgetConfig.from_dict(trace.config)
    model, real = Execution(ModelTarget(cfg, policy)), engine(cfg, policy)
    features, running = config_features(cfg), frozenset[str]()
    changes_left = sum(not isinstance(op, StepOp) for op in trace.ops)
    agreeing = 0
    for op in trace.ops:
        if isinstance(op, AddOp):
            model.apply(op)
            real.add(op)
        elif isinstance(op, AbortOp):
            model.apply(op)
            real.abort(op.id)
        else:
            m_record = model.apply(op)
            assert m_record is not None
            features |= step_features(m_record, cfg.long_prefill_token_threshold, running)
            running = frozenset(m_record.running)
            m = view(m_record, model.run.outcomes[-1], tuple(sorted({v.invariant for v in check_step(m_record)})))
            v = view(*real.step(op.accepted))
            fields = m.differs_in(v)
            if v.error is not None or m.error is not None or fields:
                return Lockstep(agreeing, frozenset(features), agreeing, () if v.error else fields, m, v,
                                cfg, model.run, trace)
            agreeing += 1
            if not m.num_scheduled_tokens and not changes_left:
                break  # both idle and no add or abort left: every later step is empty on both sides
            continue
        changes_left -= 1
    return Lockstep(agreeing, frozenset(features), config=cfg, model_run=model.run, trace=trace)
