"""A user policy against its base policy: the base, and the work gap compared on the same state."""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Callable, Optional

from ..spec.invariants import Violation, work_conserving, work_gap
from ..spec.records import RunRecord, StepRecord
from ..spec.trace import Trace
from .config import ConfigError
from .policy import BudgetPolicy
from .registry import BUILTIN, builtin_policies, get_policy
from .replay import BadInput, ReplayResult, replay_on_model
from .target import ModelTarget, TargetFactory


def base_policy(policy: BudgetPolicy) -> Optional[str]:
    """The name of the built-in policy ``policy``'s class derives from (the nearest in its
    MRO), or None when it derives from none."""
    return next((cls.name for cls in type(policy).__mro__ if cls in BUILTIN), None)


@dataclass(frozen=True)
class GapComparison:
    """The step of a trace where the policy leaves the most work undone beyond its base,
    both runs being in the same state before it: the two gaps, in tokens."""

    base: str
    step: int
    gap: int
    base_gap: int

    @property
    def excess(self) -> int:
        return self.gap - self.base_gap

    @property
    def phrase(self) -> str:
        """Both gaps, without the step (a violation names its step itself)."""
        return f"leaves {self.gap} tokens of work undone, its base {self.base} {self.base_gap} on the same state"

    def __str__(self) -> str:
        return f"step {self.step} {self.phrase}"


def gap_against_base(trace: Optional[Trace], policy: str | BudgetPolicy, ours: Optional[RunRecord] = None,
                     theirs: Optional[RunRecord] = None, start: int = 0) -> Optional[GapComparison]:
    """The step of ``trace`` where the user ``policy``'s work gap exceeds its base's the most,
    comparing while both runs are in the same state; None when it never exceeds it, the
    policy has no built-in base, or either refuses the config. ``ours`` and ``theirs``
    are the runs of ``trace`` under the policy and under its base when already made (each
    replayed otherwise; ``trace`` may be None when both are given); ``start`` compares from
    that step index on, the runs being in the same state before it (``same_state``)."""
    base = base_policy(get_policy(policy) if isinstance(policy, str) else policy)
    if base is None:
        return None
    if ours is None or theirs is None:
        assert trace is not None, "a trace to replay, or both runs"
        ours = ours if ours is not None else _run_of(trace, policy)
        theirs = theirs if theirs is not None else _run_of(trace, base)
    if ours is None or theirs is None:
        return None
    worst: Optional[GapComparison] = None
    for index in range(start, min(len(ours.steps), len(theirs.steps))):
        found = GapComparison(base, ours.steps[index].step, *_gaps(ours.steps[index], theirs.steps[index]))
        if found.excess > 0 and (worst is None or found.excess > worst.excess):
            worst = found
        if not same_state(ours, theirs, index):
            break  # the states differ from here on
    return worst


def replay_judged(trace: Trace, policy_spec: Optional[str] = None, max_work_gap: int = 0,
                  target_factory: TargetFactory = ModelTarget,
                  progress: Callable[[str], None] = lambda _: None) -> ReplayResult:
    """Replay ``trace`` (``replay_on_model``, which tells ``progress`` how far it is) under
    ``policy_spec`` (default: the trace's) and judge it as fuzz and prove judge the policy: a
    user policy with a built-in base also fails a step that leaves more than ``max_work_gap``
    tokens of work undone beyond its base's on the same state (a ``work-conserving``
    violation naming both gaps; the base replays on the model). Raises BadInput."""
    spec = policy_spec or trace.policy
    if spec in builtin_policies():
        return replay_on_model(trace, spec, target_factory, progress=progress)
    try:
        policy = get_policy(spec)
    except ConfigError:
        return replay_on_model(trace, spec, target_factory, progress=progress)  # refused there, as BadInput
    if base_policy(policy) is None:
        return replay_on_model(trace, spec, target_factory, progress=progress)

    def against_base(run: RunRecord) -> list[Violation]:
        violation = gap_violation(gap_against_base(trace, policy, ours=run), max_work_gap)
        return [] if violation is None else [violation]

    return replay_on_model(trace, spec, target_factory, judge_more=against_base, progress=progress)


def same_state(ours: RunRecord, theirs: RunRecord, index: int) -> bool:
    """Whether the two runs are still in the same state after their step ``index``: the same
    grants and preemptions, neither raised, and the same outcome."""
    return (index < min(len(ours.outcomes), len(theirs.outcomes)) and _same_step(ours.steps[index], theirs.steps[index])
            and ours.outcomes[index] == theirs.outcomes[index])


def exceeds(comparison: Optional[GapComparison], max_work_gap: int) -> bool:
    """Whether a comparison shows more undone work than the base by over ``max_work_gap`` tokens."""
    return comparison is not None and comparison.excess > max_work_gap


def gap_violation(comparison: Optional[GapComparison], max_work_gap: int) -> Optional[Violation]:
    """The ``work-conserving`` violation at the comparison's step when it fails the policy."""
    if comparison is None or not exceeds(comparison, max_work_gap):
        return None
    return Violation(work_conserving.id, comparison.step, f"{comparison.phrase} (allowed: {max_work_gap} more)")


def _gap(rec: StepRecord) -> int:
    """The step's work gap as ``work-conserving`` judges it: none in a step that preempted."""
    return 0 if rec.preempted else work_gap(rec)


def _gaps(mine: StepRecord, other: StepRecord) -> tuple[int, int]:
    """Both steps' work gaps as compared: as ``_gap`` judges each, unless both preempted the
    same requests: the same victims from the same state, so what else either leaves undone
    is its own (a victim's turn given to nobody)."""
    if mine.preempted and set(mine.preempted) == set(other.preempted):
        return work_gap(mine), work_gap(other)
    return _gap(mine), _gap(other)


def _same_step(a: StepRecord, b: StepRecord) -> bool:
    return (dict(a.num_scheduled_tokens) == dict(b.num_scheduled_tokens) and a.preempted == b.preempted
            and a.error is None and b.error is None)


def _run_of(trace: Trace, policy: str | BudgetPolicy) -> Optional[RunRecord]:
    try:
        return replay_on_model(replace(trace, expect=()), policy).run
    except BadInput:
        return None
