"""A fuzz run that ran (almost) nothing is "no evidence", never ok: in ``campaign`` (exit 4)
and in ``check``'s fuzz section (no cell marked ok, the row fails). ``fuzz`` itself:
test_fuzz_startup.py."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tokenbudget import check
from tokenbudget.check import OK, UNTESTED, CheckReport, PolicyRow, fuzz_section
from tokenbudget.cli import main
from tokenbudget.exits import NO_EVIDENCE
from tokenbudget.fuzz.session import FuzzReport
from tokenbudget.render import check as render_check
from tokenbudget.spec import INVARIANTS

QUIET = "sglang-0.5.23"  # a policy the fuzzer finds nothing wrong with


def spent_campaign(folder: Path) -> None:
    """A campaign folder whose hours were spent before any example ran (its workers never started)."""
    folder.mkdir()
    (folder / "state.json").write_text(json.dumps({"seed": 0, "seconds": 10.0}))


def test_a_campaign_that_ran_nothing_is_no_evidence(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    spent_campaign(tmp_path / "json")
    code = main(["campaign", "--hours", "0.001", "--policy", QUIET, "--workers", "1", "--database", "none",
                 "--out", str(tmp_path / "json"), "--json"])
    doc = json.loads(capsys.readouterr().out)
    assert code == NO_EVIDENCE and doc["ok"] is False and doc["verdict"] == "no evidence"
    assert doc["examples"] == 0 and "0 examples and 0 steps ran" in doc["no_evidence"]
    spent_campaign(tmp_path / "text")
    code = main(["campaign", "--hours", "0.001", "--policy", QUIET, "--workers", "1", "--database", "none",
                 "--out", str(tmp_path / "text")])
    out = capsys.readouterr().out
    assert code == NO_EVIDENCE and "verdict: no evidence: 0 examples and 0 steps ran" in out and "ok" not in out


def test_a_check_whose_fuzz_ran_nothing_marks_no_cell_ok_and_fails_the_row(monkeypatch: pytest.MonkeyPatch) -> None:
    def ran_nothing(policy: str, **_: Any) -> FuzzReport:
        return FuzzReport(policy, "model", 0)

    monkeypatch.setattr(check, "fuzz", ran_nothing)
    report = CheckReport([PolicyRow(QUIET, False, {i: UNTESTED for i in INVARIANTS})])
    fuzz_section(report, lambda _: None, None)
    row = report.rows[0]
    assert OK not in row.cells.values() and not row.ok and not report.ok
    assert row.failures == [f"fuzz (seed 0, {check.FUZZ_EXAMPLES} examples): no evidence: 0 examples and 0 steps "
                            f"ran, under the floor of 1 example and 1 step"]
    assert report.to_json()["policies"][0]["fuzz"]["examples"] == 0
    line = next(line for line in render_check(report).splitlines() if line.startswith(f"{QUIET} "))
    assert line.split()[-3:] == ["0", "0/0", "FAIL"]  # traces, fuzzed (examples/steps), verdict
