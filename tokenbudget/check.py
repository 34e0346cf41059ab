"""``tokenbudget check``: what each policy showed for each invariant, as a matrix.

A check runs SECTIONS in order; each section replays (later: proves, fuzzes) something and
marks cells of the policy x invariant matrix and failures of a policy's row. A cell keeps
the most telling mark it got: UNEXPECTED (a verdict failed on this invariant) > VIOLATED
(violated where a trace expects a violation) > "gap N" (efficiency: most budget left
unused in a step) > ok (judged, held) > "-" (not tested).

A built-in policy is judged by the corpus traces written for it, with their
expectations. A user policy (``pkg.module:Class``) replays the ops of every corpus trace
but the engine findings, with no expectations: any violation fails it; traces whose
config it refuses are skipped.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Callable, Sequence

from .corpus import load_corpus
from .model import ConfigError, builtin_policies, get_policy
from .replay import BadInput, ReplayResult, replay_on_model
from .spec import INVARIANTS
from .spec.invariants import RUN_CHECKS, STEP_CHECKS

OK, VIOLATED, UNEXPECTED, UNTESTED = "ok", "VIOLATED", "UNEXPECTED", "-"

# Invariants a replay judges (check_run) and those it measures as a work gap.
JUDGED = tuple(i.id for i in INVARIANTS.values() if i.check in STEP_CHECKS or i.check in RUN_CHECKS)
MEASURED = tuple(i.id for i in INVARIANTS.values() if i.kind == "efficiency")

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

    @property
    def ok(self) -> bool:
        return all(row.ok for row in self.rows)


Section = Callable[[CheckReport, Progress], None]


def run_check(policies: Sequence[str] = (), progress: Progress = lambda _: None) -> CheckReport:
    """Check the given policies (default: every built-in). BadInput for a policy that is
    neither registered nor loadable as ``pkg.module:Class``."""
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
        section(report, progress)
    return report


def corpus_section(report: CheckReport, progress: Progress) -> None:
    """Replay the shipped corpus: each built-in policy's own traces, every trace for a user policy."""
    traces = load_corpus()
    policy_traces = load_corpus(findings=False)
    for row in report.rows:
        # A user policy is not answerable for the findings about an engine's own loop.
        for trace in policy_traces if row.user else traces:
            if not row.user and trace.policy != row.policy:
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


SECTIONS: tuple[Section, ...] = (corpus_section,)
