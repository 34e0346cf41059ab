"""The check matrix when a section stopped or Ctrl-C ended it: a row with no failure says how
the check ended, never ok nor FAIL, and so does the verdict; a failed row still fails it."""
from __future__ import annotations

from tokenbudget import render
from tokenbudget.check import OK, CheckReport, PolicyRow
from tokenbudget.spec import INVARIANTS


def report(failures: list[str], **ended: str) -> CheckReport:
    row = PolicyRow("mine:Policy", True, {i: OK for i in INVARIANTS}, traces=3, failures=failures)
    return CheckReport([row], **ended)  # type: ignore[arg-type]


def test_an_unfailed_row_of_a_stopped_check_says_stopped() -> None:
    text = render.check(report([], stopped="proofs: policy-error: Mine.grant"))
    row = next(line for line in text.splitlines() if line.startswith("mine:Policy"))
    assert row.split()[-1] == "stopped" and text.splitlines()[-1].startswith("verdict: stopped")


def test_an_interrupted_check_says_interrupted() -> None:
    text = render.check(report([], interrupted="fuzz"))
    assert text.splitlines()[-1].startswith("verdict: interrupted")


def test_a_failed_row_fails_the_verdict_stopped_or_not() -> None:
    for ended in ({}, {"stopped": "proofs: x"}):
        text = render.check(report(["corpus: input-rows-cap"], **ended))
        row = next(line for line in text.splitlines() if line.startswith("mine:Policy"))
        assert row.split()[-1] == "FAIL" and text.splitlines()[-1].startswith("verdict: FAIL")
    assert render.check(report([])).splitlines()[-1].startswith("verdict: ok")
