"""What each policy showed for each invariant, as a matrix (``tokenbudget check`` prints it)."""
from __future__ import annotations

import re
import time
from pathlib import Path
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Sequence

from hypothesis import Phase
from hypothesis.database import ExampleDatabase
from z3 import Z3Exception

from .spec.corpus import load_corpus
from .fuzz.coverage import steps_per_path
from .fuzz.machine import ALL_SHAPES, RARE_PATHS, SCALES
from .fuzz.session import fuzz
from .model import POLICY_ERROR, ConfigError, PolicyError, builtin_policies, get_policy
from .model.findings import FINDINGS, explaining_finding
from .model.policy_guard import symbolic_branch
from .proofs.obligations import Options as ProofOptions
from .proofs.prove import default_jobs, prove
from .proofs.verdicts import PROVED, PROVED_UP_TO, Outcome
from .model.replay import BadInput, ReplayResult, replay_on_model
from .spec import INVARIANTS
from .spec.invariants import EFFICIENCY, MODEL_JUDGED
from .spec.trace import Trace, write_trace
from .evidence import NO_EVIDENCE, floor_of, shortfall
from .targets import MODEL
from .verdict import Judge, Verdict, judge

OK, VIOLATED, UNEXPECTED, UNTESTED = "ok", "VIOLATED", "UNEXPECTED", "-"
PROVED_MARK = "proved"  # an ok cell whose invariant the prover proved

# Invariants a replay judges (check_run) and those it measures as a work gap.
JUDGED = MODEL_JUDGED
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
    why: dict[str, set[str]] = field(default_factory=dict)  # invariant -> why its cell is marked (F1, base, proved)
    refuted: list[Trace] = field(default_factory=list)  # the prover's counterexamples of its own violations

    def failed_policy(self, where: str, error: str) -> None:
        self.policy_error = error
        self.failures.append(f"{where}: {error}")

    def mark(self, invariant: str, cell: str, why: str | None = None) -> None:
        """Mark a cell, keeping its most telling mark; ``why`` is kept with a VIOLATED mark
        (a finding's id, ``base``, ``record``) or a proof (``proved``)."""
        if _rank(cell) > _rank(self.cells.get(invariant, UNTESTED)):
            self.cells[invariant] = cell
        if why is not None:
            self.why.setdefault(invariant, set()).add(why)

    def shown(self, invariant: str) -> str:
        """The cell as the matrix prints it: a VIOLATED cell with why it is known, an ok one
        the prover proved as ``proved``."""
        cell, why = self.cells[invariant], self.why.get(invariant, set())
        if cell == VIOLATED and why - {PROVED_MARK}:
            return f"{cell} {','.join(sorted(why - {PROVED_MARK}))}"
        return PROVED_MARK if cell == OK and PROVED_MARK in why else cell

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
    found: list[tuple[str, Trace]] = field(default_factory=list)  # (a file name's stem, the trace) of each violation

    @property
    def ok(self) -> bool:
        return all(row.ok for row in self.rows) and self.stopped is None

    def to_json(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "invariants": [{"id": inv.id, "kind": inv.kind} for inv in INVARIANTS.values()],
            "policies": [{"policy": r.policy, "user": r.user, "cells": r.cells, "traces": r.traces,
                          "ok": r.ok, "failures": r.failures, "fuzz": r.fuzzed,
                          "why": {i: sorted(w) for i, w in r.why.items()},
                          "judged": [{"invariant": v.invariant, "verdict": v.kind, "where": v.where}
                                     for v in r.verdicts]} for r in self.rows],
            "skipped": self.skipped, "interrupted": self.interrupted, "stopped": self.stopped,
            "strict": self.strict, "max_work_gap": self.max_work_gap,
            "seconds": {name: round(s, 3) for name, s in self.seconds.items()},
            "known": [f"{r.policy}: {k}" for r in self.rows for k in r.known],
            "traces_found": len(self.found),
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
            row.mark(invariant, VIOLATED if expected else UNEXPECTED, _finding_of_trace(result.source))
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
    if verdicts:
        _keep(report, row, f"replay-{Path(trace.source).stem}", replace(trace, policy=row.policy, expect=()))
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
        row.mark(verdict.invariant, VIOLATED, known_mark(verdict.known))
        row.known.append(f"{verdict.where} (known: {verdict.known})")
        if report.strict:
            row.failures.append(f"{verdict.where} (known: {verdict.known}; --strict)")


FUZZ_EXAMPLES = 50  # per policy: a short deterministic fuzz, about 10 s for every built-in policy
RARE_PATH_EXAMPLES = 25  # a user policy's run on the rare-path shapes alone, after its FUZZ_EXAMPLES on the scales
FROM_PROOFS_EXAMPLES = 25  # a user policy's run from the prover's counterexamples of its own violations


def fuzz_section(report: CheckReport, progress: Progress, database: ExampleDatabase | None) -> None:
    """Fuzz each policy briefly (seed 0, no shrinking) and mark each violation's verdict; a
    user policy is fuzzed against its base too (``max_work_gap``), on the scales alone, then
    on the rare-path shapes alone (its loop's), so neither draws from the other's examples."""
    for row in report.rows:
        if row.policy_error:
            continue
        runs = [(ALL_SHAPES, FUZZ_EXAMPLES)] if not row.user else [(SCALES, FUZZ_EXAMPLES),
                                                                    (RARE_PATHS, RARE_PATH_EXAMPLES)]
        for shapes, examples in runs:
            if not row.policy_error:
                _fuzz_row(row, report, progress, database, shapes, examples)


def fuzz_from_proofs_section(report: CheckReport, progress: Progress, database: ExampleDatabase | None) -> None:
    """Fuzz each user policy the prover refuted on its own again, starting from the prover's
    counterexamples: the first run replays one whole, later ones go on from a cut of one or
    draw as the fuzz section did (``fuzz.trace_starts``)."""
    for row in report.rows:
        if row.user and row.refuted and not row.policy_error:
            _fuzz_row(row, report, progress, database, ALL_SHAPES, FROM_PROOFS_EXAMPLES, starts=row.refuted)


def _fuzz_row(row: PolicyRow, report: CheckReport, progress: Progress, database: ExampleDatabase | None,
              shapes: str, examples: int, starts: Sequence[Trace] = ()) -> None:
    """One fuzz run of a row's policy on the configs ``shapes`` names (and from ``starts``), marking its verdicts."""
    drawn = " from the prover's counterexamples" if starts else {
        ALL_SHAPES: "", SCALES: " on the scales", RARE_PATHS: " on the rare-path shapes"}[shapes]
    label = f"seed 0, {examples} examples{drawn}"
    progress(f"{row.policy}: fuzzing {examples} examples{drawn}")
    try:
        result = fuzz(row.policy, examples=examples, seed=0, phases=(Phase.explicit, Phase.generate),
                      database=database, max_work_gap=report.max_work_gap if row.user else None,
                      reduce_seconds=0.0, shapes=shapes, starts=starts)  # check reports; fuzz gives the minimal trace
    except ConfigError as e:
        report.skipped.append(f"fuzz {row.policy}: {e}")
        return
    if result.interrupted:  # the session ends quietly on Ctrl-C; the check ends with it
        raise KeyboardInterrupt
    short = shortfall(result.examples, result.steps, floor_of(MODEL, examples))
    fuzzed = {"examples": result.examples, "steps": result.steps, "coverage": steps_per_path(result.coverage),
              "no_evidence": short}
    row.fuzzed = fuzzed if row.fuzzed is None else _summed(row.fuzzed, fuzzed)
    if short is not None and not result.counterexamples:
        row.failures.append(f"fuzz ({label}): {NO_EVIDENCE}: {short}")
    elif short is None:
        for invariant in JUDGED:
            row.mark(invariant, OK)
    judged = _judge_of(row, report)
    for found in result.counterexamples:
        if found.kind == POLICY_ERROR:
            row.failed_policy(f"fuzz ({label})", found.message)
            continue
        verdict = judged.of_violation(found.kind, found.trace, f"fuzz ({label}): {found.message}")
        _mark_verdict(row, verdict, report)
        _keep(report, row, f"fuzz-{'from-proofs' if starts else shapes}-{found.kind}", found.trace)
        if verdict.known is None and verdict.gap is None:
            row.own.append(replace(found.trace, policy=row.policy, expect=()))


def _summed(before: dict[str, Any], after: dict[str, Any]) -> dict[str, Any]:
    """What two fuzz runs of one row rest on together: examples, steps, coverage summed."""
    coverage = {path: before["coverage"].get(path, 0) + after["coverage"].get(path, 0)
                for path in {**before["coverage"], **after["coverage"]}}
    return {"examples": before["examples"] + after["examples"], "steps": before["steps"] + after["steps"],
            "coverage": coverage, "no_evidence": before["no_evidence"] or after["no_evidence"]}


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
        verdict = judgement.verdicts.get((outcome.policy, outcome.obligation))
        if outcome.obligation in INVARIANTS:
            cell = UNEXPECTED if complaint else _proof_cell(outcome)
            why = PROVED_MARK if cell == OK else _refutation_mark(outcome, verdict) if cell == VIOLATED else None
            row.mark(outcome.obligation, cell, why)
        if verdict is not None:
            row.verdicts.append(verdict)
        for n, trace in enumerate(outcome.traces, 1):
            _keep(report, row, f"prove-{outcome.obligation}" + (f"-{n}" if n > 1 else ""), trace)
        if complaint:
            row.failures.append(f"prove: {complaint}")
            row.refuted += [trace for trace in outcome.traces if trace.policy == row.policy]
        elif verdict is not None and verdict.known is not None:  # a built-in's: its own record
            row.known.append(f"prove: {outcome.obligation} refuted (known: {verdict.known}; {outcome.detail})")


def known_mark(known: str | None) -> str:
    """Why a known violation is known, in a cell: the finding's id, ``base`` (its base shows
    it), or ``record`` (a built-in's own record)."""
    found = re.search(r"\bfinding (F\d+)", known or "")
    if found:
        return found.group(1)
    return "base" if "its base" in (known or "") else "record"


def _finding_of_trace(source: str) -> str:
    """The id of the finding whose trace ``source`` is, else ``record`` (a built-in's own trace)."""
    return next((f.id for f in FINDINGS.values() if Path(source).name == Path(f.trace_path).name), "record")


def _refutation_mark(outcome: Outcome, verdict: Verdict | None) -> str | None:
    """Why a refutation is known: its verdict's mark, or for a built-in's own record the
    finding its first counterexample shows, when one does."""
    mark = known_mark(verdict.known) if verdict is not None and verdict.known is not None else None
    if mark == "record" and outcome.traces:
        try:
            shown = explaining_finding(outcome.traces[0], outcome.obligation, outcome.policy)
        except BadInput:
            shown = None
        return shown.id if shown is not None else mark
    return mark


def _keep(report: CheckReport, row: PolicyRow, what: str, trace: Trace) -> None:
    """Keep a trace that showed a violation of the row's policy, for ``write_found``."""
    slug = "".join(c if c.isalnum() or c in "-_" else "_" for c in row.policy)
    report.found.append((f"{slug}-{what}", trace))


def write_found(report: CheckReport, folder: Path) -> list[Path]:
    """Write every trace the check found a violation on into ``folder`` as ``STEM.json``, or
    ``STEM-2.json``, ... where a file is there already (never overwritten); their paths."""
    written = []
    for stem, trace in report.found:
        n = 1
        while True:
            path = folder / (f"{stem}.json" if n == 1 else f"{stem}-{n}.json")
            try:
                write_trace(trace, path)
                break
            except FileExistsError:
                n += 1
        written.append(path)
    return written


def _proof_cell(outcome: Outcome) -> str:
    if outcome.verdict in (PROVED, PROVED_UP_TO):
        return OK
    return f"gap {outcome.gap}" if outcome.gap is not None else VIOLATED


SECTIONS: tuple[Section, ...] = (corpus_section, fuzz_section, proofs_section, fuzz_from_proofs_section)
