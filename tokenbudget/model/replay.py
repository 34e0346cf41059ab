"""Replay a trace on the reference model and judge the run: invariants, work gap, expectations."""
from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass, field, replace
from typing import Any, Callable, Mapping, Sequence

from ..spec import interrupts
from ..spec.execution import Execution
from .target import ModelTarget, TargetFactory
from . import POLICY_ERROR, BudgetConfig, BudgetPolicy, ConfigError, PolicyError, get_policy
from .config import PolicyNotRunnable
from ..spec import RunRecord, StepLimits, StepRecord, Violation, work_gap
from ..spec.columnar_checks import check_run_columnar
from ..spec.invariants import ends_in_fixpoint, model_error
from ..spec.target import TargetUnavailable, describe
from ..spec.trace import (
    ConfigRejectedExpectation, Expectation, NoViolationExpectation, StepExpectation, StepOp, Trace,
    ViolationExpectation, dump_item,
)

PROGRESS_OPS = 1024  # ops between two reports of how far a replay is (the listener paces its output)


class BadInput(Exception):
    """A trace that cannot be replayed as given: an unknown policy, a config the policy
    refuses although no ``config_rejected`` is expected, a request the scheduler refuses.
    The message is one line naming the trace."""


@dataclass(frozen=True)
class StepSummary:
    """One step of a replay: grants, drafts (requests with at least one), tokens against
    T, runner rows against B, preemptions, the violations found in it and its work gap."""

    step: int
    num_scheduled_tokens: Mapping[str, int]
    scheduled_draft_tokens: Mapping[str, int]
    tokens: int
    token_cap: int
    rows: int
    row_cap: int
    preempted: tuple[str, ...]
    violations: tuple[Violation, ...]
    work_gap: int

    def to_json(self) -> dict[str, Any]:
        return {
            "step": self.step, "num_scheduled_tokens": dict(self.num_scheduled_tokens),
            "scheduled_draft_tokens": dict(self.scheduled_draft_tokens), "tokens": self.tokens,
            "token_cap": self.token_cap, "rows": self.rows, "row_cap": self.row_cap,
            "preempted": list(self.preempted), "violations": [v.invariant for v in self.violations],
            "work_gap": self.work_gap,
        }


@dataclass(frozen=True)
class ExpectationResult:
    expectation: Expectation
    met: bool
    message: str

    def to_json(self) -> dict[str, Any]:
        return {"expect": dump_item(self.expectation), "met": self.met, "message": self.message}


@dataclass(frozen=True)
class ReplayResult:
    """What a replay showed. ``refusal`` is the ConfigError message when the config was
    refused (then no op ran); ``limits`` is None then. ``errors`` lists, as
    ``"step N: Type: message (file:line)"``, an exception the target raised (the run
    stopped there)."""

    source: str
    policy: str
    refusal: str | None
    limits: StepLimits | None
    steps: tuple[StepSummary, ...]
    violations: tuple[Violation, ...]
    expectations: tuple[ExpectationResult, ...]
    max_work_gap: int
    errors: tuple[str, ...] = ()
    run: RunRecord | None = field(default=None, repr=False, compare=False)  # None when refused
    engine_version: str | None = None  # the engine version followed, and why, e.g. "vllm 0.33 (the newest ...)"

    @property
    def expected_violations(self) -> frozenset[str]:
        return frozenset(r.expectation.violation for r in self.expectations
                         if isinstance(r.expectation, ViolationExpectation))

    @property
    def policy_error(self) -> str | None:
        """The ``policy-error: ...`` line when the user policy failed (raised or returned the
        wrong type), else None."""
        found = next((e[e.index(POLICY_ERROR):] for e in self.errors if POLICY_ERROR + ":" in e), None)
        return None if found is None else re.sub(r" \(policy_guard\.py:\d+\)$", "", found)  # where the guard raised

    @property
    def problems(self) -> tuple[str, ...]:
        """Why the verdict fails: a policy error, unmet expectations and, unless some
        violation is expected, every violation (the target's exceptions are ``model-error``
        violations). Empty when the verdict is ok."""
        failed = (self.policy_error,) if self.policy_error else ()
        unmet = tuple(r.message for r in self.expectations if not r.met)
        if self.expected_violations:
            return failed + unmet
        return failed + unmet + tuple(map(str, self.violations))

    @property
    def ok(self) -> bool:
        return not self.problems

    def to_json(self) -> dict[str, Any]:
        return {
            "trace": self.source, "policy": self.policy, "ok": self.ok, "config_refused": self.refusal,
            "limits": asdict(self.limits) if self.limits else None,
            "steps": [s.to_json() for s in self.steps],
            "violations": [{"invariant": v.invariant, "step": v.step, "message": v.message} for v in self.violations],
            "expectations": [r.to_json() for r in self.expectations],
            "max_work_gap": self.max_work_gap, "errors": list(self.errors),
            "policy_error": self.policy_error, "engine_version": self.engine_version,
        }


def preflight(trace: Trace, policy: str | None = None) -> None:
    """Raises BadInput where a replay of ``trace`` would before its first op: a policy that
    does not resolve, or an invalid config the trace does not expect refused."""
    _resolve_policy(trace, policy)
    try:
        BudgetConfig.from_dict(trace.config)
    except ConfigError as e:
        _refused(trace, "", str(e), "invalid config")


def replay_on_model(trace: Trace, policy: str | BudgetPolicy | None = None,
                    target_factory: TargetFactory = ModelTarget,
                    judge_more: Callable[[RunRecord], Sequence[Violation]] | None = None,
                    progress: Callable[[str], None] = lambda _: None) -> ReplayResult:
    """Run the trace on the reference scheduler under its policy (or ``policy``: a name,
    ``pkg.module:Class`` or an instance) and judge it. Raises BadInput, and TargetUnavailable
    when the target cannot run here. ``target_factory``
    builds what executes the ops from the config and the policy (the torch runner's
    target wraps the reference scheduler and executes each of its steps). ``judge_more``
    adds the violations of a rule the spec alone cannot judge on the run (a user policy's
    work gap against its base, ``base_gap.replay_judged``). ``progress`` hears how far
    the run is, every PROGRESS_OPS ops, and when the judging starts."""
    name, pol = _resolve_policy(trace, policy)
    try:
        cfg = BudgetConfig.from_dict(trace.config)
    except ConfigError as e:
        return _refused(trace, name, str(e), "invalid config")
    try:
        target = target_factory(cfg, pol)
    except PolicyNotRunnable as e:  # no config would do: the target, not the config, is the problem
        raise BadInput(f"{trace.source}: {e}") from None
    except ConfigError as e:
        return _refused(trace, name, str(e), f"{name} refuses the config")
    except PolicyError as e:  # the user's policy failed while the target was built: the verdict, not a crash
        return replace(_judge(trace, name, None, None), errors=(f"config: {e}",))
    except TargetUnavailable:  # the engine is not here: the user's input, not a verdict
        raise
    except Exception as e:  # the model raised while it was built: a model-error, not a crash
        return _judge(trace, name, None, None, crash=f"{describe(e)} while it was built")
    execution = Execution(target)
    crash = _run(trace, execution, progress)
    progress(f"judging {len(execution.run.steps)} steps")
    version = _version_used(cfg, pol, target)
    if crash is not None and POLICY_ERROR + ":" in crash:
        return replace(_judge(trace, name, None, execution.run), errors=(crash,), engine_version=version)
    return replace(_judge(trace, name, None, execution.run, crash, _with_target_judged(target, judge_more),
                          frozenset(getattr(target, "explained_errors", ()))), engine_version=version)


def _with_target_judged(target: object, judge_more: Callable[[RunRecord], Sequence[Violation]] | None
                        ) -> Callable[[RunRecord], Sequence[Violation]] | None:
    """``judge_more`` and what a target running the model beside it judged (``judged``:
    ``spec.target.Target``)."""
    judged = getattr(target, "judged", None)
    if judged is None:
        return judge_more
    return lambda run: [*(judge_more(run) if judge_more is not None else ()), *judged]


def _version_used(cfg: BudgetConfig, policy: BudgetPolicy, target: object) -> str | None:
    """Which engine version ran: a real engine's release, or the version the model followed
    (and that it is the policy's default when the trace names none); None without versions."""
    real = getattr(target, "version", None)
    if real is not None:
        return f"vLLM {real.release} (the real scheduler)"
    version = policy.engine_version(cfg)
    if version is None:
        return None
    source = "the trace's engine_version" if cfg.engine_version else "the policy's default; the trace names none"
    return f"{getattr(policy, 'engine', '')} {version} ({source})".strip()


def _refused(trace: Trace, name: str, refusal: str, what: str) -> ReplayResult:
    """A judged refusal where the trace expects one; BadInput otherwise."""
    if not any(isinstance(e, ConfigRejectedExpectation) for e in trace.expect):
        raise BadInput(f"{trace.source}: {what}: {refusal}")
    return _judge(trace, name, refusal, None)


def _resolve_policy(trace: Trace, policy: str | BudgetPolicy | None) -> tuple[str, BudgetPolicy]:
    if isinstance(policy, BudgetPolicy):
        return getattr(policy, "name", type(policy).__name__), policy
    spec = policy or trace.policy
    try:
        return spec, get_policy(spec)
    except ConfigError as e:
        raise BadInput(f"{trace.source}: {e}") from None


def _run(trace: Trace, execution: Execution, progress: Callable[[str], None]) -> str | None:
    """Apply the trace's ops until the end, a step in which the target raised, or an add
    or abort that raised (then what it raised, ``ops[i]: ...``, is returned). On a target
    whose steps are pure (``repeats_fixpoints``), once only steps are left and the run
    reached a fixpoint, the rest is written as the fixpoint's record again, not run."""
    repeats = getattr(execution.target, "repeats_fixpoints", False)
    last_op = max((i for i, op in enumerate(trace.ops) if not isinstance(op, StepOp)), default=-1)
    for index, op in enumerate(trace.ops):
        if execution.crashed is not None:
            break
        interrupts.check()
        if index % PROGRESS_OPS == 0:
            progress(f"op {index} of {len(trace.ops)}, step {len(execution.run.steps)}")
        try:
            execution.apply(op)
        except ValueError as e:
            raise BadInput(f"{trace.source}: ops[{index}]: {e}") from None
        except PolicyError as e:
            return f"ops[{index}]: {e}"
        except Exception as e:
            interrupts.check()  # Ctrl-C, turned into another exception on the way: not the model's fault
            return f"{describe(e)} in ops[{index}]"
        if repeats and index > last_op and ends_in_fixpoint(execution.run):
            _repeat_fixpoint(execution.run, len(trace.ops) - index - 1)
            break
    return None


def _repeat_fixpoint(run: RunRecord, steps: int) -> None:
    """Write ``steps`` more steps of a run that ends in a fixpoint: each the last record and
    outcome again, but its number (what the target would give, at a tenth of the cost)."""
    record, outcome = run.steps[-1], run.outcomes[-1]
    first = len(run.steps)
    for n in range(1, steps + 1):
        run.events.append(("step", first + n - 1))
        run.steps.append(replace(record, step=record.step + n))
        run.outcomes.append(replace(outcome, step=outcome.step + n))


def _judge(trace: Trace, name: str, refusal: str | None, run: RunRecord | None,
           crash: str | None = None,
           judge_more: Callable[[RunRecord], Sequence[Violation]] | None = None,
           explained: frozenset[int] = frozenset()) -> ReplayResult:
    """``crash``: what the model raised outside a step, a ``model-error`` of the run;
    ``explained``: the steps whose error a finding explains: the engine raised inside them, so
    their records are partial and the finding's violation (``judge_more``) is their verdict."""
    records = run.steps if run else []
    violations = tuple(v for v in check_run_columnar(run)  # check_run's verdict, large steps screened
                       if v.step not in explained) if run else ()
    if run and judge_more is not None:
        violations += tuple(judge_more(run))
    if crash is not None:
        violations += (Violation(model_error.id, None, f"the scheduler raised {crash}"),)
    by_step: dict[int | None, list[Violation]] = {}
    for v in violations:
        by_step.setdefault(v.step, []).append(v)
    steps = tuple(_summary(rec, by_step.get(rec.step, ())) for rec in records)
    results = tuple(_expectation(e, records, violations, refusal) for e in trace.expect)
    return ReplayResult(
        source=trace.source, policy=name, refusal=refusal, limits=run.limits if run else None, steps=steps,
        violations=violations, expectations=results, max_work_gap=max((s.work_gap for s in steps), default=0),
        errors=tuple(f"step {rec.step}: {rec.error}" for rec in records if rec.error is not None), run=run,
    )


def _summary(rec: StepRecord, violations: Sequence[Violation]) -> StepSummary:
    """The step's summary; ``violations`` are those found in it."""
    return StepSummary(
        step=rec.step,
        num_scheduled_tokens=dict(rec.num_scheduled_tokens),
        scheduled_draft_tokens=_nonzero(rec.scheduled_draft_tokens),
        tokens=rec.total_scheduled_tokens,
        token_cap=rec.limits.max_num_scheduled_tokens,
        rows=rec.total_runner_rows,
        row_cap=rec.limits.max_num_batched_tokens,
        preempted=tuple(rec.preempted),
        violations=tuple(violations),
        work_gap=work_gap(rec),
    )


def _nonzero(counts: Mapping[str, int]) -> dict[str, int]:
    return {rid: n for rid, n in counts.items() if n}


def _normal(value: Mapping[str, int] | Sequence[str] | int) -> dict[str, int] | list[str] | int:
    """Maps without their zero entries (a request left out has 0); sequences as lists."""
    if isinstance(value, int):
        return value
    return _nonzero(value) if isinstance(value, Mapping) else list(value)


def _expectation(e: Expectation, records: Sequence[StepRecord], violations: Sequence[Violation],
                 refusal: str | None) -> ExpectationResult:
    if isinstance(e, ConfigRejectedExpectation):
        if refusal is None:
            return ExpectationResult(e, False, "the config was accepted, expected a refusal")
        if e.config_rejected not in refusal:
            lacks = json.dumps(e.config_rejected)
            return ExpectationResult(e, False, f"refused, but the message lacks {lacks}: {refusal}")
        return ExpectationResult(e, True, f"refused: {refusal}")
    if isinstance(e, ViolationExpectation):
        steps = sorted({v.step for v in violations if v.invariant == e.violation}, key=lambda s: (s is None, s))
        if not steps:
            return ExpectationResult(e, False, f"{e.violation} was not violated")
        where = ", ".join("the run" if s is None else str(s) for s in steps)
        return ExpectationResult(e, True, f"{e.violation} violated (steps {where})")
    if isinstance(e, NoViolationExpectation):
        if violations:
            ids = ", ".join(sorted({v.invariant for v in violations}))
            return ExpectationResult(e, False, f"{len(violations)} violations ({ids})")
        return ExpectationResult(e, True, "no invariant was violated")
    return _step_expectation(e, records)


def _step_expectation(e: StepExpectation, records: Sequence[StepRecord]) -> ExpectationResult:
    if e.step >= len(records):
        return ExpectationResult(e, False, f"step {e.step} did not run")
    rec = records[e.step]
    seen, wrong = [], []
    for key, want, got in (
        ("num_scheduled_tokens", e.num_scheduled_tokens, rec.num_scheduled_tokens),
        ("scheduled_draft_tokens", e.scheduled_draft_tokens, rec.scheduled_draft_tokens),
        ("preempted", e.preempted, rec.preempted),
        ("kv_blocks_in_use", e.kv_blocks_in_use, rec.kv_blocks_in_use),
    ):
        if want is None:
            continue
        want, got = _normal(want), _normal(got)
        seen.append(f"{key} {json.dumps(got)}")
        if want != got:
            wrong.append(f"{key} {json.dumps(got)}, expected {json.dumps(want)}")
    if wrong:
        return ExpectationResult(e, False, f"step {e.step}: " + "; ".join(wrong))
    return ExpectationResult(e, True, f"step {e.step}: " + "; ".join(seen))
