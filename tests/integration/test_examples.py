"""The README's worked examples of extending tokenbudget: its code is the files under
examples/, and ``check`` gives each the verdict the README states."""
from __future__ import annotations

from pathlib import Path

import pytest

from tokenbudget.check import UNEXPECTED, run_check

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"


@pytest.mark.parametrize("name", ["ngram_drafts_free.py", "clip_first.py"])
def test_the_readme_shows_each_example_as_it_is(name):
    readme = (ROOT / "README.md").read_text()
    assert f"```python\n{(EXAMPLES / name).read_text()}```" in readme
    assert f"PYTHONPATH=examples tokenbudget check --policy {name[:-3]}:" in readme


def test_the_budget_rule_example_fails_on_the_rows_it_does_not_charge(monkeypatch):
    monkeypatch.syspath_prepend(str(EXAMPLES))
    report = run_check(["ngram_drafts_free:NgramDraftsFree"])
    row = report.rows[0]
    assert not report.ok and row.cells["input-rows-cap"] == UNEXPECTED
    assert any("input-rows-cap" in failure and "ngram" in failure for failure in row.failures), row.failures


def test_the_loop_example_passes(monkeypatch):
    monkeypatch.syspath_prepend(str(EXAMPLES))
    report = run_check(["clip_first:ClipFirst"])
    assert report.ok, report.rows[0].failures
