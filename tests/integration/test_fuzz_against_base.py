"""``fuzz`` judges a user policy's work gap against its base policy (``model.base_gap``):
a step that leaves more work undone than the base on the same state is a ``work-conserving``
violation naming both gaps, unless ``--max-work-gap`` accepts it; built-ins are not judged so."""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from tokenbudget import check
from tokenbudget.check import UNEXPECTED, UNTESTED, CheckReport, PolicyRow
from tokenbudget.cli import main
from tokenbudget.fuzz.failures import FAILURE_CLASSES
from tokenbudget.fuzz.machine import machine_class
from tokenbudget.fuzz.session import fuzz
from tokenbudget.model import get_policy
from tokenbudget.model.replay import replay_on_model
from tokenbudget.model.base_gap import gap_against_base, replay_judged
from tokenbudget.spec import INVARIANTS
from tokenbudget.spec.trace import ViolationExpectation, load_trace

QUALITY = Path(__file__).resolve().parents[1] / "quality"
THROTTLE = "real_bugs.vllm_52922_prefill_throttle:Policy"  # vLLM #52922: prefill charged twice to the token budget
COPY = "real_bugs.copies:VllmAdaptiveCopy"
EXAMPLES = 30  # seed 0 finds the throttle in its 10th example
BOTH_GAPS = re.compile(r"step (\d+):? leaves (\d+) tokens of work undone, its base vllm-adaptive (\d+) on the same state")
WORK = "work-conserving"


@pytest.fixture(autouse=True)
def real_bugs_importable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(QUALITY))


def test_the_prefill_throttle_is_found_with_both_gaps() -> None:
    report = fuzz(THROTTLE, examples=EXAMPLES, seed=0, max_work_gap=0)
    found = {c.kind: c for c in report.counterexamples}[WORK]
    gaps = BOTH_GAPS.search(found.message)
    assert gaps is not None and int(gaps[2]) > int(gaps[3]), found.message
    assert found.message.endswith("(allowed: 0 more)")
    # the reduced trace shows the same complaint to the rule prove and check use, expects it, and
    # replays with it where the user policy is judged against its base (replay_judged)
    comparison = gap_against_base(found.trace, THROTTLE)
    assert comparison is not None and f"step {comparison.step}: {comparison.phrase}" in found.message
    assert ViolationExpectation(WORK) in found.trace.expect
    judged = replay_judged(found.trace)
    assert [str(v) for v in judged.violations if v.invariant == WORK] == [found.message]
    assert not [r for r in judged.expectations if not r.met] and judged.max_work_gap == int(gaps[2])
    assert WORK not in {v.invariant for v in replay_on_model(found.trace).violations}  # the spec alone measures it


def test_the_counterexample_replays_with_the_complaint(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["fuzz", "--policy", THROTTLE, "--examples", str(EXAMPLES), "--workers", "1", "--database", "none",
                 "--corpus", str(tmp_path), "--json"])
    doc = json.loads(capsys.readouterr().out)
    report = doc["policies"][0]
    assert code == 1 and WORK in report["violations"] and WORK not in report["known"]
    message, trace = report["violations"][WORK]["message"], report["violations"][WORK]["trace"]
    assert BOTH_GAPS.search(message), message
    code = main(["replay", trace, "--policy", THROTTLE])
    out = capsys.readouterr().out
    assert code == 1 and f"{WORK} violated" in out  # a counterexample replays failing, with its violation
    assert message in out and f"largest work gap seen: {BOTH_GAPS.search(message)[2]} tokens" in out
    assert load_trace(trace).description == message
    code = main(["replay", trace, "--policy", THROTTLE, "--max-work-gap", str(10**6)])
    assert code == 1 and f"{WORK} was not violated" in capsys.readouterr().out  # accepted: the expectation fails


def test_a_max_work_gap_large_enough_accepts_it() -> None:
    for accepted in (10**6, None):  # None: no gap judged, as for a built-in
        report = fuzz(THROTTLE, examples=EXAMPLES, seed=0, max_work_gap=accepted)
        assert WORK not in {c.kind for c in report.counterexamples}, accepted


def test_checks_fuzz_section_judges_a_user_row_against_its_base() -> None:
    for max_work_gap, fails in ((0, True), (10**6, False)):
        report = CheckReport([PolicyRow(THROTTLE, True, {i: UNTESTED for i in INVARIANTS})], max_work_gap=max_work_gap)
        check.fuzz_section(report, lambda _: None, None)
        row = report.rows[0]
        judged = [f for f in row.failures if f.startswith("fuzz") and BOTH_GAPS.search(f)]
        assert bool(judged) == fails and (row.cells[WORK] == UNEXPECTED) == fails, row.failures


def test_a_correct_copy_of_a_builtin_is_not_flagged() -> None:
    assert machine_class(COPY, get_policy(COPY), max_work_gap=0).base is not None  # it is judged against its base
    others = frozenset(FAILURE_CLASSES) - {WORK}  # its base's known violations end a run quietly
    report = fuzz(COPY, examples=60, seed=0, max_work_gap=0, known=others)
    assert report.steps > 0 and report.counterexamples == []


def test_a_builtin_is_never_judged_against_a_base() -> None:
    cls = machine_class("vllm-adaptive", get_policy("vllm-adaptive"), max_work_gap=0)
    assert cls.base is None and cls.max_work_gap is None


@pytest.mark.parametrize("value, words", [
    ("-1", "expected a whole number >= 0"),
    ("1.5", "expected a whole number >= 0"),
    ("lots", "expected a whole number >= 0"),
    (str(2**24 + 1), "expected at most"),
])
def test_a_bad_max_work_gap_exits_2_with_one_line(value: str, words: str, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["fuzz", "--policy", THROTTLE, "--examples", "1", f"--max-work-gap={value}"])
    out, err = capsys.readouterr()
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and err.startswith("tokenbudget: error: ") and "--max-work-gap" in err, err
    assert words in err, err


def test_replay_refuses_a_max_work_gap_on_the_vllm_target(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    trace = tmp_path / "t.json"
    trace.write_text("{}")
    code = main(["replay", str(trace), "--target", "vllm", "--max-work-gap", "5"])
    out, err = capsys.readouterr()
    assert code == 2 and out == "" and err.count("\n") == 1 and "--max-work-gap" in err, err


def test_a_campaign_judges_a_user_policy_against_its_base(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The campaign starts from a database where a bounded fuzz run kept the throttle's
    example, so it meets it in its first example however slow the machine is; 10.8 s, as the
    worker's own start-up took more than 3.6 s at load 15."""
    database = str(tmp_path / "examples")
    assert main(["fuzz", "--policy", THROTTLE, "--examples", str(EXAMPLES), "--seed", "0", "--database", database,
                 "--max-work-gap", "0", "--json"]) == 1
    capsys.readouterr()
    code = main(["campaign", "--policy", THROTTLE, "--hours", "0.003", "--workers", "1", "--out", str(tmp_path / "c"),
                 "--database", database, "--max-work-gap", "0", "--json"])
    doc = json.loads(capsys.readouterr().out)
    assert code == 1 and doc["max_work_gap"] == 0
    found = [v for v in doc["violations"] if v["kind"] == WORK]
    assert found and BOTH_GAPS.search(found[0]["message"]), doc["violations"]
    assert ViolationExpectation(WORK) in load_trace(found[0]["trace"]).expect
