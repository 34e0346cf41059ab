"""How a user policy's violations are judged: by the findings' matchers, and against its base.

A user policy (``pkg.module:Class``) is judged on every obligation. A violation it shows
in a run is not its own, and is called known, only when a finding about its engine's loop
recognises the mechanism in the counterexample (``findings.explaining_finding``, the
finding's own matcher): the engine's loop does it whatever the policy. A copy of a
known-bad built-in policy therefore fails as that policy would.

The config obligations judge the config requirements, which a policy inherits from the
engine's shared checks: a refutation of ``config-sound`` or ``config-complete`` is known
when its base policy, the nearest built-in class in its MRO (``base_policy``), shows the
same on the same counterexample (``base_shows``): it accepts that config and cannot
serve it either, or refuses it too.

Any other violation fails the policy; ``strict`` fails known ones too. Efficiency is
relative (``gap_against_base``): the work gap of each step (``spec.work_gap``) under the
policy and under its base, compared while both runs are in the same state (a step that
preempted counts only where both preempted the same requests); leaving more
undone than the base, by more than ``max_work_gap`` tokens, fails (``gap_complaint``). A
policy with no built-in base has its gap reported, not judged. The prover and the fuzzer
share this rule: the fuzzer hands in the two runs it steps side by side.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Callable, Optional, Sequence

from ..spec.invariants import CONFIG, EFFICIENCY, INVARIANTS, Violation, work_conserving, work_gap
from ..spec.records import RunRecord, StepRecord
from ..spec.trace import Trace
from .config import BudgetConfig, ConfigError
from .findings import explaining_finding
from .policy import BudgetPolicy
from .registry import BUILTIN, builtin_policies, get_policy
from .replay import BadInput, ReplayResult, replay_on_model
from .target import ModelTarget, TargetFactory


def base_policy(policy: BudgetPolicy) -> Optional[str]:
    """The name of the built-in policy ``policy``'s class derives from (the nearest in its
    MRO), or None when it derives from none."""
    return next((cls.name for cls in type(policy).__mro__ if cls in BUILTIN), None)


def judged(invariant: str) -> bool:
    """Whether a refutation of ``invariant`` can fail a user policy by itself: every
    registered invariant but efficiency, which is judged against the base."""
    return invariant in INVARIANTS and INVARIANTS[invariant].kind != EFFICIENCY


def explanation(trace: Trace, invariant: str, policy_spec: str) -> Optional[str]:
    """Why the violation of ``invariant`` that ``trace`` shows under the user policy is not
    the policy's own (one phrase), or None when it is."""
    policy = get_policy(policy_spec)
    try:
        finding = explaining_finding(trace, invariant, policy)
    except BadInput:
        finding = None
    if finding is not None:
        return f"finding {finding.id}, {finding.spec}"
    base = base_policy(policy)
    inherited = invariant in INVARIANTS and INVARIANTS[invariant].kind == CONFIG
    if inherited and base is not None and base_shows(trace, invariant, base):
        return f"its base {base} shows it on the same trace"
    return None


def base_shows(trace: Trace, invariant: str, base: str) -> bool:
    """Whether the built-in policy ``base`` shows the violation of ``invariant`` on ``trace``:
    for ``config-complete`` it refuses the config too; for ``config-sound`` it accepts the
    config and its first step grants nothing; otherwise its replay violates ``invariant``."""
    try:
        cfg = BudgetConfig.from_dict(trace.config)
    except ConfigError:
        return False
    policy = get_policy(base)
    try:
        policy.validate(cfg)
    except ConfigError:
        return invariant == "config-complete"
    if INVARIANTS.get(invariant) is not None and INVARIANTS[invariant].kind == CONFIG:
        if invariant != "config-sound":
            return False
        result = _replay(trace, base)
        return result is not None and bool(result.steps) and result.steps[0].tokens == 0
    result = _replay(trace, base)
    return result is not None and any(v.invariant == invariant for v in result.violations)


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


def gap_complaint(comparison: Optional[GapComparison], max_work_gap: int) -> Optional[str]:
    """Why the comparison fails the policy, both gaps in one phrase; None when it does not."""
    return f"{comparison} (allowed: {max_work_gap} more)" if exceeds(comparison, max_work_gap) else None


def gap_violation(comparison: Optional[GapComparison], max_work_gap: int) -> Optional[Violation]:
    """The ``work-conserving`` violation at the comparison's step when it fails the policy."""
    if comparison is None or not exceeds(comparison, max_work_gap):
        return None
    return Violation(work_conserving.id, comparison.step, f"{comparison.phrase} (allowed: {max_work_gap} more)")


def refutation_complaint(policy_spec: str, invariant: str, traces: Sequence[Trace], max_work_gap: int = 0,
                         strict: bool = False) -> Optional[str]:
    """Why a refutation of ``invariant`` (its counterexample ``traces``) fails the user
    policy, one phrase; None when it does not."""
    if INVARIANTS.get(invariant) is not None and INVARIANTS[invariant].kind == EFFICIENCY:
        worst = max((c for c in map(lambda t: gap_against_base(t, policy_spec), traces) if c is not None),
                    key=lambda c: c.excess, default=None)
        return gap_complaint(worst, max_work_gap)
    if not judged(invariant) or not traces:
        return None
    why = explanation(traces[0], invariant, policy_spec)
    if why is None:
        return "its own violation"
    return f"known ({why}), failing under --strict" if strict else None


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
    result = _replay(trace, policy)
    return None if result is None else result.run


def _replay(trace: Trace, policy: str | BudgetPolicy) -> Optional[ReplayResult]:
    try:
        return replay_on_model(replace(trace, expect=()), policy)
    except BadInput:
        return None
