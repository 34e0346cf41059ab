"""The check matrix's cells say why: a known violation names its finding (or ``base``,
``record``), a proved invariant reads ``proved``; the most telling mark still wins."""
from __future__ import annotations

from tokenbudget.check import OK, PROVED_MARK, UNEXPECTED, VIOLATED, PolicyRow, _finding_of_trace, known_mark
from tokenbudget.model.findings import FINDINGS
from tokenbudget.spec import INVARIANTS


def row() -> PolicyRow:
    return PolicyRow("p", False, {i: "-" for i in INVARIANTS})


def test_a_known_violation_names_why_and_a_proof_reads_proved() -> None:
    r = row()
    r.mark("spec-shape", VIOLATED, "F1")
    r.mark("spec-shape", VIOLATED, "F4")
    r.mark("token-cap", OK)
    r.mark("token-cap", OK, PROVED_MARK)
    r.mark("seq-cap", OK)
    assert (r.shown("spec-shape"), r.shown("token-cap"), r.shown("seq-cap")) == ("VIOLATED F1,F4", "proved", "ok")


def test_an_unexpected_mark_wins_over_a_known_one_and_a_proof_over_nothing_violated() -> None:
    r = row()
    r.mark("progress", VIOLATED, "F2")
    r.mark("progress", UNEXPECTED)
    r.mark("kv-capacity", VIOLATED, "base")
    r.mark("kv-capacity", OK, PROVED_MARK)  # a replay saw it violated: the cell stays VIOLATED
    assert r.shown("progress") == UNEXPECTED and r.shown("kv-capacity") == "VIOLATED base"


def test_why_a_verdict_is_known_is_read_from_its_reason() -> None:
    assert known_mark("finding F3, tokenbudget/spec/SPEC.md §6 F3") == "F3"
    assert known_mark("its base vllm-adaptive shows it on the same trace") == "base"
    assert known_mark("vllm-adaptive's own record") == "record"


def test_a_findings_trace_names_its_finding() -> None:
    finding = next(iter(FINDINGS.values()))
    assert _finding_of_trace(str(finding.trace_path)) == finding.id
    assert _finding_of_trace("/somewhere/seed-000-vllm-adaptive.json") == "record"
