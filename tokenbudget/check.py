"""What each policy showed for each invariant, as a matrix (``tokenbudget check`` prints it).

A check runs SECTIONS in order; each section replays, fuzzes or proves something and
marks cells of the policy x invariant matrix and failures of a policy's row. A cell keeps
the most telling mark it got: UNEXPECTED (a verdict failed on this invariant) > VIOLATED
(violated where a trace expects a violation) > "gap N" (efficiency: most budget left
unused in a step) > ok (judged, held) > "-" (not tested).

A built-in policy is judged by the corpus traces written for it, with their
expectations. A user policy (``pkg.module:Class``) replays the ops of every corpus trace
but the engine findings, with no expectations: any violation fails it; traces whose
config it refuses are skipped.

Then every policy is fuzzed briefly on the model (``fuzz_section``): FUZZ_EXAMPLES
examples from seed 0, deterministic, not shrunk, keeping what fails in the example
database given (none by default). A violation that is known (``is_known``: a finding
about its engine's loop whose mechanism the counterexample shows, or for a built-in policy
refuted in the proofs' verdict manifest or expected by a corpus trace of it) marks its cell
VIOLATED; any other, and any exception inside the model, fails the row.

Last, every obligation of each policy is proved (``proofs_section``, ``tokenbudget prove``):
a proved invariant marks its cell ok, a refuted one VIOLATED (a work gap "gap N"); a
verdict the proofs' manifest does not expect (for a user policy: a refuted ledger
invariant, or any unknown verdict) marks it UNEXPECTED and fails the row.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Callable, Sequence

from hypothesis import Phase
from hypothesis.database import ExampleDatabase

from .spec.corpus import load_corpus
from .fuzz.failures import TARGET_ERROR
from .fuzz.session import fuzz
from .model import POLICY_ERROR, ConfigError, PolicyError, builtin_policies, get_policy
from .proofs.manifest import load as load_manifest
from .proofs.obligations import Options as ProofOptions
from .proofs.prove import default_jobs, judge, prove
from .proofs.verdicts import PROVED, PROVED_UP_TO, REFUTED, Outcome
from .model.findings import explaining_finding
from .model.replay import BadInput, ReplayResult, replay_on_model
from .spec import INVARIANTS
from .spec.invariants import EFFICIENCY, JUDGED_KINDS
from .spec.trace import Trace, ViolationExpectation

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

    @property
    def ok(self) -> bool:
        return all(row.ok for row in self.rows)

    def to_json(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "invariants": [{"id": inv.id, "kind": inv.kind} for inv in INVARIANTS.values()],
            "policies": [{"policy": r.policy, "user": r.user, "cells": r.cells, "traces": r.traces,
                          "ok": r.ok, "failures": r.failures} for r in self.rows],
            "skipped": self.skipped, "interrupted": self.interrupted,
            "replays": [r.to_json() for r in self.replays],
        }


Section = Callable[[CheckReport, Progress, "ExampleDatabase | None"], None]


def run_check(policies: Sequence[str] = (), progress: Progress = lambda _: None,
              database: ExampleDatabase | None = None) -> CheckReport:
    """Check the given policies (default: every built-in); the fuzz section saves its
    failing examples in ``database``. BadInput for a policy that is neither registered
    nor loadable as ``pkg.module:Class``."""
    builtin = builtin_policies()
    names = list(dict.fromkeys(policies)) or list(builtin)
    for name in names:
        if name not in builtin:
            try:
                get_policy(name)
            except ConfigError as e:
                raise BadInput(str(e)) from None
    report = CheckReport([PolicyRow(n, n not in builtin, {i: UNTESTED for i in INVARIANTS}) for n in names])
    for section in SECTIONS:
        try:
            section(report, progress, database)
        except KeyboardInterrupt:  # Ctrl-C: report what the finished sections showed
            report.interrupted = section.__name__.removesuffix("_section")
            break
    return report


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


FUZZ_EXAMPLES = 50  # per policy: a short deterministic fuzz, about 10 s for every built-in policy


def known_violations(policy: str) -> frozenset[str]:
    """The invariants a built-in policy is known to violate by its own record: refuted in
    the proofs' verdict manifest or expected by a corpus trace of it (the engine findings
    aside: ``is_known`` asks those about each counterexample). Empty for a user policy."""
    known = {e.violation for t in load_corpus(findings=False) if t.policy == policy
             for e in t.expect if isinstance(e, ViolationExpectation)}
    known |= {name for name, expected in load_manifest().get(policy, {}).items() if expected.verdict == REFUTED}
    return frozenset(known)


def is_known(policy: str, kind: str, trace: Trace) -> bool:
    """Whether the violation of ``kind`` that ``trace`` shows under ``policy`` is known: in
    the policy's record (``known_violations``), or a finding about its engine's loop whose
    mechanism the trace's run on the model shows (SPEC.md §6: no budget policy of that
    engine changes it). ConfigError for a policy that cannot be loaded."""
    return kind in known_violations(policy) or explaining_finding(trace, kind, policy) is not None


def fuzz_section(report: CheckReport, progress: Progress, database: ExampleDatabase | None) -> None:
    """Fuzz each policy briefly (seed 0, no shrinking): a known violation marks the cell
    VIOLATED; another, or an exception in the model, fails the row."""
    for row in report.rows:
        if row.policy_error:
            continue
        progress(f"{row.policy}: fuzzing {FUZZ_EXAMPLES} examples")
        try:
            result = fuzz(row.policy, examples=FUZZ_EXAMPLES, seed=0, phases=(Phase.explicit, Phase.generate),
                          database=database)
        except ConfigError as e:
            report.skipped.append(f"fuzz {row.policy}: {e}")
            continue
        for invariant in JUDGED:
            row.mark(invariant, OK)
        for found in result.counterexamples:
            if found.kind == POLICY_ERROR:
                row.failed_policy(f"fuzz (seed 0, {FUZZ_EXAMPLES} examples)", found.message)
                continue
            known = is_known(row.policy, found.kind, found.trace)
            if found.kind != TARGET_ERROR:
                row.mark(found.kind, VIOLATED if known else UNEXPECTED)
            if not known:
                row.failures.append(f"fuzz (seed 0, {FUZZ_EXAMPLES} examples): {found.message}")


def proofs_section(report: CheckReport, progress: Progress, database: ExampleDatabase | None) -> None:
    """Prove every obligation of each policy and judge the verdicts (``proofs.prove.judge``)."""
    rows = {row.policy: row for row in report.rows if not row.policy_error}
    outcomes = prove([name for name, row in rows.items() if not row.user], ProofOptions(), jobs=default_jobs(),
                     progress=progress)
    for name in [name for name, row in rows.items() if row.user]:  # one at a time: a failing one fails its row
        try:
            outcomes += prove([name], ProofOptions(), progress=progress)
        except PolicyError as e:
            rows[name].failed_policy("prove", str(e))
    judgement = judge(outcomes)
    for outcome in judgement.outcomes:
        row = rows[outcome.policy]
        complaint = judgement.complaints.get((outcome.policy, outcome.obligation))
        if outcome.obligation in INVARIANTS:
            row.mark(outcome.obligation, UNEXPECTED if complaint else _proof_cell(outcome))
        if complaint:
            row.failures.append(f"prove: {complaint}")


def _proof_cell(outcome: Outcome) -> str:
    if outcome.verdict in (PROVED, PROVED_UP_TO):
        return OK
    return f"gap {outcome.gap}" if outcome.gap is not None else VIOLATED


SECTIONS: tuple[Section, ...] = (corpus_section, fuzz_section, proofs_section)
