"""``tokenbudget fuzz``: exit codes, the summary, --json, and traces that replay."""
from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tokenbudget.cli import main
from tokenbudget.fuzz.database import NONE
from tokenbudget.fuzz.parallel import Job, Live, fuzz_workers
from tokenbudget.model.target import ModelTarget
from tokenbudget.spec.invariants import INVARIANTS

# its one known violation, a row overflow (input-rows-cap, refuted in the manifest), is found and shrunk in
# seconds from seed 0; it has no stuck drain (FastDeploy's F5), whose thousands of steps would fill the examples
FAST_TO_SHRINK = "fastdeploy-v0"


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def run_process(*argv: str) -> tuple[int, str, str]:
    """The command in a process of its own, as a user runs it: nothing an earlier test left
    in this process (imported user policies, patched modules) reaches the session."""
    done = subprocess.run([sys.executable, "-m", "tokenbudget.cli", *argv, "--quiet"], capture_output=True, text=True,
                          timeout=600)
    return done.returncode, done.stdout, done.stderr


def test_a_known_violation_exits_0_and_1_under_strict_and_its_trace_replays(tmp_path: Path,
                                                                             capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run_process("fuzz", "--policy", FAST_TO_SHRINK, "--examples", "30", "--corpus", str(tmp_path),
                                 "--json")
    doc = json.loads(out)
    assert code == 0 and err == "" and doc["ok"] is True and doc["corpus"] == str(tmp_path)  # check's rule
    report = doc["policies"][0]
    assert report["policy"] == FAST_TO_SHRINK and report["examples"] > 0 and report["steps_per_second"] > 0
    found = report["violations"]["input-rows-cap"]
    assert "input-rows-cap" in report["known"] and report["judged"]["input-rows-cap"] == "known"
    assert found["first_seen_seconds"] >= 0
    assert Path(found["program"]).read_text().count("state.") >= 2
    code, out, _ = run(capsys, "replay", found["trace"])
    assert code == 1 and "violated, as expected (input-rows-cap" in out
    code, out, _ = run_process("fuzz", "--policy", FAST_TO_SHRINK, "--examples", "30", "--corpus",
                               str(tmp_path / "strict"), "--json", "--strict")
    assert code == 1 and json.loads(out)["ok"] is False


def test_the_text_summary(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run_process("fuzz", "--policy", FAST_TO_SHRINK, "--examples", "30", "--corpus", str(tmp_path))
    assert code == 0 and err == ""
    assert "steps/s" in out and f"{FAST_TO_SHRINK}: input-rows-cap (known: {FAST_TO_SHRINK}'s own record)" in out
    assert f"corpus {tmp_path}" in out and "verdict: ok: 1 known violation " in out


def test_no_violation_exits_0(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # No example database: under a profile with one, the session's holds what other tests found.
    # SGLang 0.5.23's policy breaks nothing the fuzzer draws (F8 needs k >= 8); TensorRT-LLM's, used
    # before, shows T2 since its model follows the KV manager's throw.
    code, out, _ = run(capsys, "fuzz", "--policy", "sglang-0.5.23", "--examples", "10",
                       "--corpus", str(tmp_path), "--database", "none")
    assert code == 0 and "verdict: ok: no violation" in out
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("argv, words", [
    (["--examples", "0"], "expected a number > 0"),
    (["--examples", "5", "--seconds", "1"], "not allowed with argument"),
    (["--policy", "no-such-policy"], "unknown policy 'no-such-policy'"),
    (["--target", "vllm", "--policy", "fastdeploy-v0"], "whose accounting is vllm-adaptive or vllm-static"),
    (["--target", "runner"], "invalid choice"),
])
def test_bad_usage_exits_2_with_one_line(argv: list[str], words: str, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, "fuzz", *argv)
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and err.startswith("tokenbudget: error: ") and words in err, err


def test_ctrl_c_during_a_parallel_fuzz_keeps_what_the_workers_told() -> None:
    """A KeyboardInterrupt while two workers fuzz ends with a report of the policy running,
    marked interrupted, holding the counts and counterexamples the workers' tallies brought."""
    job = Job(("vllm-static", "fastdeploy-v0"), ModelTarget, "model", None, 120.0, 0, NONE, time.time())
    told = []

    def ctrl_c_once_counted(counts: Live) -> None:
        told.append((counts.examples, counts.steps))
        if counts.steps > 0:  # a tally can count an example that has not stepped yet
            raise KeyboardInterrupt

    reports = fuzz_workers(job, 2, ctrl_c_once_counted)
    assert [r.policy for r in reports] == ["vllm-static"] and reports[0].interrupted
    examples, steps = told[-1]
    assert reports[0].examples >= examples > 0 and reports[0].steps >= steps > 0
    kinds = [c.kind for c in reports[0].counterexamples]
    assert len(kinds) == len(set(kinds)) and set(kinds) <= set(INVARIANTS)


def test_a_run_started_from_a_trace_shows_its_violation_first_and_bad_starts_are_one_line(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    findings = Path(__file__).parents[2] / "tokenbudget" / "corpus" / "findings"
    f6 = findings / "f6-sglang-v1-full-page-uncounted.json"
    for workers in ("1", "2"):
        code, out, _ = run_process("fuzz", "--policy", "sglang-v1-retract", "--start-from", str(f6), "--examples", "1",
                                   "--workers", workers, "--database", NONE, "--json")
        found = json.loads(out)["policies"][0]["violations"]
        assert code == 0 and found["kv-capacity@F6"]["example"] == 1, (workers, found)
    (tmp_path / "empty").mkdir()
    code, _, err = run(capsys, "fuzz", "--start-from", str(tmp_path / "empty"), "--examples", "1")
    assert code == 2 and err.count("\n") == 1 and "holds no *.json trace" in err
    f7 = findings / "f7-fastdeploy-564c78d78-lone-chunk-own-reserve.json"  # a FastDeploy commit's config
    code, _, err = run(capsys, "fuzz", "--policy", "vllm-adaptive", "--start-from", str(f7), "--examples", "1")
    assert code == 2 and err.count("\n") == 1 and "no trace there has ops on a config vllm-adaptive accepts" in err
