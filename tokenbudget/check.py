"""What each policy showed for each invariant, as a matrix (``tokenbudget check`` prints it).

A check runs SECTIONS in order; each section replays, fuzzes or proves something and
marks cells of the policy x invariant matrix and failures of a policy's row. A cell keeps
the most telling mark it got: UNEXPECTED (a verdict failed on this invariant) > VIOLATED
(violated where a trace expects a violation) > "gap N" (efficiency: most budget left
unused in a step) > ok (judged, held) > "-" (not tested).

A built-in policy is judged by the corpus traces written for it, with their
expectations. A user policy (``pkg.module:Class``) replays the ops of every corpus trace
but the engine findings, with no expectations; traces whose config it refuses are
skipped. Its violations are judged by ``model.verdict_rules``: known (a finding's matcher
recognises the mechanism; for a config obligation, its base policy shows the same on the
same config) marks the cell VIOLATED, any other fails the row; a step that leaves more work undone
than its base on the same state, by more than ``max_work_gap`` tokens, fails it too.

Then every policy is fuzzed briefly on the model (``fuzz_section``): FUZZ_EXAMPLES
examples from seed 0, deterministic, neither shrunk nor reduced (``tokenbudget fuzz`` gives
the minimal trace), keeping what fails in the example
database given (none by default). A violation that is known (``is_known``) marks its cell
VIOLATED; any other (an exception inside the model is the invariant ``model-error``)
fails the row.

Last, every obligation of each policy is proved (``proofs_section``, ``tokenbudget prove``):
a proved invariant marks its cell ok, a refuted one VIOLATED (a work gap "gap N"); a
verdict ``proofs.prove.judge`` complains of (a built-in's verdict the manifest does not
record; a user policy's own refutation or any unknown verdict) marks it UNEXPECTED and
fails the row. With ``strict``, a known violation fails the row too.

A section that fails (a symbolic branch in a user policy, found by the prover) stops the
check; what the sections before it found is kept in the report (``stopped``).
"""
from __future__ import annotations

import functools
import time
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Sequence

from hypothesis import Phase
from hypothesis.database import ExampleDatabase
from z3 import Z3Exception

from .spec.corpus import load_corpus
from .fuzz.session import fuzz
from .model import POLICY_ERROR, ConfigError, PolicyError, builtin_policies, get_policy
from .model.policy_guard import symbolic_branch
from .model.verdict_rules import exceeds, explanation, gap_against_base
from .proofs.manifest import load as load_manifest
from .proofs.obligations import Options as ProofOptions
from .proofs.prove import default_jobs, judge, prove
from .proofs.verdicts import PROVED, PROVED_UP_TO, REFUTED, Outcome
from .model.findings import explaining_finding
from .model.replay import BadInput, ReplayResult, replay_on_model
from .spec import INVARIANTS
from .spec.invariants import CONFIG, EFFICIENCY, JUDGED_KINDS
from .spec.trace import Trace, ViolationExpectation

OK, VIOLATED, UNEXPECTED, UNTESTED = "ok", "VIOLATED", "UNEXPECTED", "-"

# Invariants a replay judges (check_run) and those it measures as a work gap.
JUDGED = tuple(i.id for i in INVARIANTS.values() if i.kind in JUDGED_KINDS)
MEASURED = tuple(i.id for i in INVARIANTS.values() if i.kind == EFFICIENCY)
CONFIG_OBLIGATIONS = tuple(i.id for i in INVARIANTS.values() if i.kind == CONFIG)

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
    known: list[str] = field(default_factory=list)  # one line each: a violation put down to a finding or the base
    policy_error: str | None = None  # the user policy failed (raised, a wrong type): later sections skip it

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
                          "ok": r.ok, "failures": r.failures} for r in self.rows],
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
    """A user policy's replay of a corpus trace: every violation judged by ``verdict_rules``,
    and its work gap against its base's on the same state."""
    row.traces += 1
    if result.refusal is not None:
        return
    for invariant in JUDGED:
        row.mark(invariant, OK)
    for invariant in MEASURED:
        row.mark(invariant, f"gap {result.max_work_gap}" if result.max_work_gap else OK)
    for invariant in dict.fromkeys(v.invariant for v in result.violations):
        first = next(str(v) for v in result.violations if v.invariant == invariant)
        _judge_violation(row, invariant, f"{result.source}: {first}",
                         explanation(trace, invariant, row.policy), report.strict)
    comparison = gap_against_base(trace, row.policy)
    if exceeds(comparison, report.max_work_gap):
        row.mark(MEASURED[0], UNEXPECTED)
        row.failures.append(f"{result.source}: work-conserving: {comparison} (--max-work-gap {report.max_work_gap})")


def _judge_violation(row: PolicyRow, invariant: str, where: str, why: str | None, strict: bool) -> None:
    """Mark a violation: known (``why``) VIOLATED, failing only when ``strict``; else UNEXPECTED, failing."""
    if why is None:
        row.mark(invariant, UNEXPECTED)
        row.failures.append(where)
        return
    row.mark(invariant, VIOLATED)
    row.known.append(f"{where} (known: {why})")
    if strict:
        row.failures.append(f"{where} (known: {why}; --strict)")


FUZZ_EXAMPLES = 50  # per policy: a short deterministic fuzz, about 10 s for every built-in policy


def known_violations(policy: str) -> frozenset[str]:
    """The invariants a built-in policy is known to violate by its own record: refuted in
    the proofs' verdict manifest or expected by a corpus trace of it (the engine findings
    aside: ``is_known`` asks those about each counterexample). Empty for a user policy."""
    return _recorded_violations().get(policy, frozenset())


@functools.cache
def _recorded_violations() -> dict[str, frozenset[str]]:
    """``known_violations`` of every policy at once. The corpus and the manifest are package
    data, read once: a check asks this of every policy and of each violation fuzzing finds."""
    out: dict[str, set[str]] = {}
    for t in load_corpus(findings=False):
        out.setdefault(t.policy, set()).update(e.violation for e in t.expect if isinstance(e, ViolationExpectation))
    for policy, cells in load_manifest().items():
        out.setdefault(policy, set()).update(name for name, expected in cells.items() if expected.verdict == REFUTED)
    return {policy: frozenset(kinds) for policy, kinds in out.items()}


def is_known(policy: str, kind: str, trace: Trace) -> bool:
    """Whether the violation of ``kind`` that ``trace`` shows under ``policy`` is known.
    For a built-in policy: in its record (``known_violations``), or a finding about its
    engine's loop whose mechanism the trace's run on the model shows (SPEC.md §6: no
    budget policy of that engine changes it). For a user policy: ``verdict_rules.explanation``
    (a finding's matcher, or its base shows it on the same trace). ConfigError for a
    policy that cannot be loaded."""
    return known_why(policy, kind, trace) is not None


def known_why(policy: str, kind: str, trace: Trace) -> str | None:
    """Why the violation is known, one phrase (``is_known``), or None."""
    if policy not in builtin_policies():
        return explanation(trace, kind, policy)
    if kind in known_violations(policy):
        return f"{policy}'s own record"
    finding = explaining_finding(trace, kind, policy)
    return None if finding is None else f"finding {finding.id}, {finding.spec}"


def fuzz_section(report: CheckReport, progress: Progress, database: ExampleDatabase | None) -> None:
    """Fuzz each policy briefly (seed 0, no shrinking): a known violation marks the cell
    VIOLATED; another, or an exception in the model, fails the row. A user policy is judged
    against its base too (``max_work_gap``): more work undone is its own violation."""
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
        for invariant in JUDGED:
            row.mark(invariant, OK)
        for found in result.counterexamples:
            if found.kind == POLICY_ERROR:
                row.failed_policy(f"fuzz (seed 0, {FUZZ_EXAMPLES} examples)", found.message)
                continue
            _judge_violation(row, found.kind, f"fuzz (seed 0, {FUZZ_EXAMPLES} examples): {found.message}",
                             known_why(row.policy, found.kind, found.trace), report.strict)


def proofs_section(report: CheckReport, progress: Progress, database: ExampleDatabase | None) -> None:
    """Prove every obligation of each policy and judge the verdicts (``proofs.prove.judge``)."""
    rows = {row.policy: row for row in report.rows if not row.policy_error}
    outcomes = prove([name for name, row in rows.items() if not row.user], ProofOptions(), jobs=default_jobs(),
                     progress=progress)
    for name in [name for name, row in rows.items() if row.user]:  # one at a time: a failing one fails its row
        try:
            outcomes += prove([name], ProofOptions(), progress=progress)
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
        if complaint:
            row.failures.append(f"prove: {complaint}")
        elif row.user and outcome.verdict == REFUTED and outcome.obligation in JUDGED + CONFIG_OBLIGATIONS:
            row.known.append(f"prove: {outcome.obligation} refuted (known: "
                             f"{explanation(outcome.traces[0], outcome.obligation, row.policy)}; {outcome.detail})")


def _proof_cell(outcome: Outcome) -> str:
    if outcome.verdict in (PROVED, PROVED_UP_TO):
        return OK
    return f"gap {outcome.gap}" if outcome.gap is not None else VIOLATED


SECTIONS: tuple[Section, ...] = (corpus_section, fuzz_section, proofs_section)
