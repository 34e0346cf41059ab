"""What each policy showed for each invariant, as a matrix (``tokenbudget check`` prints it)."""
from __future__ import annotations

import time
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Sequence

from hypothesis import Phase
from hypothesis.database import ExampleDatabase
from z3 import Z3Exception

from .spec.corpus import load_corpus
from .fuzz.coverage import steps_per_path
from .fuzz.session import fuzz
from .model import POLICY_ERROR, ConfigError, PolicyError, builtin_policies, get_policy
from .model.policy_guard import symbolic_branch
from .proofs.obligations import Options as ProofOptions
from .proofs.prove import default_jobs, prove
from .proofs.verdicts import PROVED, PROVED_UP_TO, Outcome
from .model.replay import BadInput, ReplayResult, replay_on_model
from .spec import INVARIANTS
from .spec.invariants import EFFICIENCY, JUDGED_KINDS
from .spec.trace import Trace
from .evidence import NO_EVIDENCE, floor_of, shortfall
from .targets import MODEL
from .verdict import Judge, Verdict, judge

OK, VIOLATED, UNEXPECTED, UNTESTED = "ok", "VIOLATED", "UNEXPECTED", "-"

# Invariants a replay judges (check_run) and those it measures as a work gap.
JUDGED = tuple(i.id for i in INVARIANTS.values() if i.kind in JUDGED_KINDS)
MEASURED = tuple(i.id for i in INVARIANTS.values() if i.kind == EFFICIENCY)

Progress = Callable[[str], None]


def _rank(cell: str) -> tuple[int, int]:
    if cell.startswith("gap "):
        return 2, int(cell[4:])
    return {UNTESTED: 0, OK: 1, VIOLATED: 3, UNEXPECTED: 4}[cell], 0


@dataclass
class PolicyRow:
    policy: str
    user: bool
    cells: dict[str, str]
    traces: int = 0
    failures: list[str] = field(default_factory=list)
    known: list[str] = field(default_factory=list)  # one line each: a known violation and why
    verdicts: list[Verdict] = field(default_factory=list)  # every violation judged (``tokenbudget.verdict``), in order
    policy_error: str | None = None  # the user policy failed (raised, a wrong type): later sections skip it
    own: list[Trace] = field(default_factory=list)  # traces that showed a violation of its own, for the prover
    fuzzed: dict[str, Any] | None = None  # what its fuzz run rests on: examples, steps, coverage; None: not fuzzed

    def failed_policy(self, where: str, error: str) -> None:
        self.policy_error = error
        self.failures.append(f"{where}: {error}")

    def mark(self, invariant: str, cell: str) -> None:
        if _rank(cell) > _rank(self.cells.get(invariant, UNTESTED)):
            self.cells[invariant] = cell

    @property
    def ok(self) -> bool:
        return not self.failures


@dataclass
class CheckReport:
    rows: list[PolicyRow]
    replays: list[ReplayResult] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)  # one line each: what was not run and why
    interrupted: str | None = None  # the section Ctrl-C stopped; the sections before it are complete
    max_work_gap: int = 0  # tokens of work a user policy may leave undone beyond its base in a step
    strict: bool = False  # a known violation fails the row too
    stopped: str | None = None  # "section: one line" when a section failed; the sections before it are complete
    error: Exception | None = field(default=None, repr=False)  # what stopped it
    seconds: dict[str, float] = field(default_factory=dict)  # section -> wall seconds it took (reported, never judged)

    @property
    def ok(self) -> bool:
        return all(row.ok for row in self.rows) and self.stopped is None

    def to_json(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "invariants": [{"id": inv.id, "kind": inv.kind} for inv in INVARIANTS.values()],
            "policies": [{"policy": r.policy, "user": r.user, "cells": r.cells, "traces": r.traces,
                          "ok": r.ok, "failures": r.failures, "fuzz": r.fuzzed,
                          "judged": [{"invariant": v.invariant, "verdict": v.kind, "where": v.where}
                                     for v in r.verdicts]} for r in self.rows],
            "skipped": self.skipped, "interrupted": self.interrupted, "stopped": self.stopped,
            "strict": self.strict, "max_work_gap": self.max_work_gap,
            "seconds": {name: round(s, 3) for name, s in self.seconds.items()},
            "known": [f"{r.policy}: {k}" for r in self.rows for k in r.known],
            "replays": [r.to_json() for r in self.replays],
        }


Section = Callable[[CheckReport, Progress, "ExampleDatabase | None"], None]


def run_check(policies: Sequence[str] = (), progress: Progress = lambda _: None,
              database: ExampleDatabase | None = None, max_work_gap: int = 0, strict: bool = False) -> CheckReport:
    """Check the given policies (default: every built-in); the fuzz section saves its
    failing examples in ``database``. BadInput for a policy that is neither registered
    nor loadable as ``pkg.module:Class``. A section that raises stops the check: the
    report keeps the sections before it, ``stopped`` says which failed and why, ``error``
    holds the exception."""
    builtin = builtin_policies()
    names = list(dict.fromkeys(policies)) or list(builtin)
    for name in names:
        if name not in builtin:
            try:
                get_policy(name)
            except ConfigError as e:
                raise BadInput(str(e)) from None
    report = CheckReport([PolicyRow(n, n not in builtin, {i: UNTESTED for i in INVARIANTS}) for n in names],
                         max_work_gap=max_work_gap, strict=strict)
    for section in SECTIONS:
        name = section.__name__.removesuffix("_section")
        started = time.perf_counter()
        try:
            section(report, progress, database)
            report.seconds[name] = time.perf_counter() - started
        except KeyboardInterrupt:  # Ctrl-C: report what the finished sections showed
            report.interrupted = name
            break
        except Exception as e:  # keep what the finished sections showed; the command says what stopped it
            report.stopped, report.error = f"{name}: {stop_line(e)}", e
            break
    return report


def stop_line(e: Exception) -> str:
    """One line for an exception that stopped a section: a symbolic branch in a user
    policy names the method, its file:line and the IntLike helpers (``policy_guard``)."""
    if isinstance(e, Z3Exception):
        return symbolic_branch(e)
    return " ".join(str(e).split()) or type(e).__name__


def stopped_by_input(report: CheckReport) -> bool:
    """Whether what stopped the check is the user's input (a policy the prover cannot run),
    not a fault of tokenbudget."""
    e = report.error
    return isinstance(e, (Z3Exception, BadInput, ConfigError)) or (isinstance(e, PolicyError) and e.symbolic)


def corpus_section(report: CheckReport, progress: Progress, database: ExampleDatabase | None) -> None:
    """Replay the shipped corpus: each built-in policy's own traces, every trace for a user policy."""
    traces = load_corpus()
    policy_traces = load_corpus(findings=False)
    for row in report.rows:
        # A user policy is not answerable for the findings about an engine's own loop.
        for trace in policy_traces if row.user else traces:
            if (not row.user and trace.policy != row.policy) or row.policy_error:
                continue
            progress(f"{row.policy}: {trace.source}")
            if row.user:
                try:
                    result = replay_on_model(replace(trace, expect=()), row.policy)
                except BadInput as e:
                    report.skipped.append(str(e))
                    continue
            else:
                result = replay_on_model(trace)
            report.replays.append(result)
            if result.policy_error:
                row.failed_policy(result.source, result.policy_error)
                continue
            if row.user:
                _mark_user(row, trace, result, report)
            else:
                _mark(row, result)


def _mark(row: PolicyRow, result: ReplayResult) -> None:
    row.traces += 1
    if result.refusal is None:
        expected = result.expected_violations
        violated = {v.invariant for v in result.violations}
        for invariant in JUDGED:
            row.mark(invariant, OK)
        for invariant in MEASURED:
            row.mark(invariant, f"gap {result.max_work_gap}" if result.max_work_gap else OK)
        for invariant in violated:
            row.mark(invariant, VIOLATED if expected else UNEXPECTED)
        for invariant in expected - violated:
            row.mark(invariant, UNEXPECTED)
    row.failures += [f"{result.source}: {problem}" for problem in result.problems]


def _mark_user(row: PolicyRow, trace: Trace, result: ReplayResult, report: CheckReport) -> None:
    """A user policy's replay of a corpus trace: its violations and its work gap against its
    base's on the same state, judged on that run (``verdict.Judge.of_run``)."""
    row.traces += 1
    if result.refusal is not None:
        return
    for invariant in JUDGED:
        row.mark(invariant, OK)
    for invariant in MEASURED:
        row.mark(invariant, f"gap {result.max_work_gap}" if result.max_work_gap else OK)
    verdicts = _judge_of(row, report).of_run(trace, result, result.source)
    for verdict in verdicts:
        _mark_verdict(row, verdict, report)
    if any(v.known is None and v.gap is None for v in verdicts):
        row.own.append(replace(trace, policy=row.policy, expect=()))


def _judge_of(row: PolicyRow, report: CheckReport) -> Judge:
    return Judge(row.policy, report.max_work_gap)


def _mark_verdict(row: PolicyRow, verdict: Verdict, report: CheckReport) -> None:
    """Mark a verdict: known VIOLATED, failing only under ``strict``; own or a gap UNEXPECTED, failing."""
    row.verdicts.append(verdict)
    if verdict.gap is not None:
        row.mark(verdict.invariant, UNEXPECTED)
        row.failures.append(f"{verdict.where} (--max-work-gap {report.max_work_gap})")
    elif verdict.known is None:
        row.mark(verdict.invariant, UNEXPECTED)
        row.failures.append(verdict.where)
    else:
        row.mark(verdict.invariant, VIOLATED)
        row.known.append(f"{verdict.where} (known: {verdict.known})")
        if report.strict:
            row.failures.append(f"{verdict.where} (known: {verdict.known}; --strict)")


FUZZ_EXAMPLES = 50  # per policy: a short deterministic fuzz, about 10 s for every built-in policy


def fuzz_section(report: CheckReport, progress: Progress, database: ExampleDatabase | None) -> None:
    """Fuzz each policy briefly (seed 0, no shrinking) and mark each violation's verdict; a
    user policy is fuzzed against its base too (``max_work_gap``)."""
    for row in report.rows:
        if row.policy_error:
            continue
        progress(f"{row.policy}: fuzzing {FUZZ_EXAMPLES} examples")
        try:
            result = fuzz(row.policy, examples=FUZZ_EXAMPLES, seed=0, phases=(Phase.explicit, Phase.generate),
                          database=database, max_work_gap=report.max_work_gap if row.user else None,
                          reduce_seconds=0.0)  # check reports a violation; fuzz gives its minimal trace
        except ConfigError as e:
            report.skipped.append(f"fuzz {row.policy}: {e}")
            continue
        if result.interrupted:  # the session ends quietly on Ctrl-C; the check ends with it
            raise KeyboardInterrupt
        short = shortfall(result.examples, result.steps, floor_of(MODEL, FUZZ_EXAMPLES))
        row.fuzzed = {"examples": result.examples, "steps": result.steps, "coverage": steps_per_path(result.coverage),
                      "no_evidence": short}
        if short is not None and not result.counterexamples:
            row.failures.append(f"fuzz (seed 0, {FUZZ_EXAMPLES} examples): {NO_EVIDENCE}: {short}")
        elif short is None:
            for invariant in JUDGED:
                row.mark(invariant, OK)
        judged = _judge_of(row, report)
        for found in result.counterexamples:
            if found.kind == POLICY_ERROR:
                row.failed_policy(f"fuzz (seed 0, {FUZZ_EXAMPLES} examples)", found.message)
                continue
            where = f"fuzz (seed 0, {FUZZ_EXAMPLES} examples): {found.message}"
            verdict = judged.of_violation(found.kind, found.trace, where)
            _mark_verdict(row, verdict, report)
            if verdict.known is None and verdict.gap is None:
                row.own.append(replace(found.trace, policy=row.policy, expect=()))


def proofs_section(report: CheckReport, progress: Progress, database: ExampleDatabase | None) -> None:
    """Prove every obligation of each policy and judge the verdicts (``verdict.judge``)."""
    rows = {row.policy: row for row in report.rows if not row.policy_error}
    outcomes = prove([name for name, row in rows.items() if not row.user], ProofOptions(), jobs=default_jobs(),
                     progress=progress)
    for name in [name for name, row in rows.items() if row.user]:  # one at a time: a failing one fails its row
        try:
            outcomes += prove([name], ProofOptions(), jobs=default_jobs(), progress=progress,
                              candidates=rows[name].own)
        except PolicyError as e:
            if e.symbolic:  # the policy cannot be proved at all: bad input, which stops the check
                raise
            rows[name].failed_policy("prove", str(e))
        except Z3Exception:  # a symbolic branch outside the guarded methods: bad input too
            raise
        except Exception as e:  # the prover stopped on this policy (the model raised under it): its row fails
            rows[name].mark("model-error", UNEXPECTED)
            rows[name].failures.append(f"prove: the prover stopped on this policy: {stop_line(e)}")
    judgement = judge(outcomes, report.max_work_gap, report.strict)
    for outcome in judgement.outcomes:
        row = rows[outcome.policy]
        complaint = judgement.complaints.get((outcome.policy, outcome.obligation))
        if outcome.obligation in INVARIANTS:
            row.mark(outcome.obligation, UNEXPECTED if complaint else _proof_cell(outcome))
        verdict = judgement.verdicts.get((outcome.policy, outcome.obligation))
        if verdict is not None:
            row.verdicts.append(verdict)
        if complaint:
            row.failures.append(f"prove: {complaint}")
        elif row.user and verdict is not None and verdict.known is not None:  # a built-in's: the manifest
            row.known.append(f"prove: {outcome.obligation} refuted (known: {verdict.known}; {outcome.detail})")


def _proof_cell(outcome: Outcome) -> str:
    if outcome.verdict in (PROVED, PROVED_UP_TO):
        return OK
    return f"gap {outcome.gap}" if outcome.gap is not None else VIOLATED


SECTIONS: tuple[Section, ...] = (corpus_section, fuzz_section, proofs_section)
