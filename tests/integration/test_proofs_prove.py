"""``tokenbudget prove`` over every built-in policy: verdicts as the manifest records them,
and every counterexample a trace file that replays with its violation."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tokenbudget.cli import main
from tokenbudget.model import builtin_policies, get_policy
from tokenbudget.proofs import manifest
from tokenbudget.proofs.obligation_table import all_obligations
from tokenbudget.proofs.prove import emit
from tokenbudget.verdict import judge
from tokenbudget.proofs.verdicts import REFUTED, UNKNOWN, Outcome
from tokenbudget.model.replay import replay_on_model
from tokenbudget.spec.trace import ConfigRejectedExpectation, ViolationExpectation, load_trace

pytestmark = pytest.mark.proofs


@pytest.fixture(scope="module")
def proved(builtin_proofs: list[Outcome]) -> list[Outcome]:
    return builtin_proofs


def test_every_builtin_verdict_is_the_recorded_one(proved: list[Outcome]) -> None:
    outcomes = proved
    assert not [o for o in outcomes if o.verdict == UNKNOWN]
    assert manifest.compare(outcomes) == []
    assert judge(outcomes).ok


def test_the_manifest_covers_every_builtin_obligation() -> None:
    recorded = manifest.load()
    for name in builtin_policies():
        applicable = [o.id for o in all_obligations().values() if o.applies(get_policy(name))]
        assert sorted(recorded[name]) == sorted(applicable), name


def test_every_counterexample_replays_from_its_file(proved: list[Outcome], tmp_path: Path) -> None:
    outcomes = proved
    refuted = [o for o in outcomes if o.verdict == REFUTED]
    written = emit(outcomes, tmp_path)
    assert len(written) == sum(len(o.traces) for o in refuted) > 0
    for path in written:
        trace = load_trace(path)
        result = replay_on_model(trace)
        assert result.ok, (path.name, result.problems)
        for e in trace.expect:
            if isinstance(e, ViolationExpectation):
                assert e.violation in {v.invariant for v in result.violations}, path.name
            if isinstance(e, ConfigRejectedExpectation):
                assert result.refusal is not None, path.name
    gaps = [o for o in refuted if o.obligation == "work-conserving"]
    assert all(o.gap and replay_on_model(o.traces[0]).steps[-1].work_gap == o.gap for o in gaps)


def test_a_safety_refutation_is_the_smallest_found(proved: list[Outcome]) -> None:
    outcomes = proved
    rows = {(o.policy, o.obligation): o for o in outcomes}
    v0 = rows[("fastdeploy-v0", "input-rows-cap")].traces[0]
    assert (v0.config["max_num_batched_tokens"], v0.config["max_num_seqs"], v0.config["num_speculative_tokens"]) == \
           (1, 1, 1)  # one request, one decode step of 1 + k = 2 rows on B = 1
    f1 = rows[("vllm-adaptive", "spec-shape")].traces[0]
    assert f1.config["long_prefill_token_threshold"] <= f1.config["num_speculative_tokens"]  # SPEC.md finding F1


# -- the command ----------------------------------------------------------------------------
def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(["prove", *argv])
    out, err = capsys.readouterr()
    return code, out, err


def test_prove_json_is_one_document(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, "--policy", "vllm-static", "--invariant", "token-cap", "--invariant",
                         "input-rows-cap", "--json")
    doc = json.loads(out)
    assert code == 0 and err == "" and doc["ok"] is True
    verdicts = {o["obligation"]: (o["verdict"], o["expected"], o["as_expected"]) for o in doc["outcomes"]}
    assert verdicts == {"token-cap": ("proved", "proved", True), "input-rows-cap": ("refuted", "refuted", True)}
    assert doc["outcomes"][1]["traces"][0]["format"] == "tokenbudget.trace/1"
    assert all(o["recorded_seconds"] >= 0 for o in doc["outcomes"])


def test_prove_table(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "--policy", "fastdeploy-v0", "--invariant", "input-rows-cap")
    assert code == 0 and "refuted" in out.splitlines()[1] and "every verdict is as expected" in out
    recorded = manifest.load()["fastdeploy-v0"]["input-rows-cap"].seconds
    assert f"s, recorded {recorded:.2f}s): " in out  # the measured seconds beside the manifest's


@pytest.mark.parametrize("argv, words", [
    (["--invariant", "no-such-thing"], "unknown obligation 'no-such-thing'"),
    (["--max-requests", "0"], "expected a number > 0"),
    (["--timeout", "soon"], "number > 0"),
    (["--timeout", "nan"], "number > 0"),
    (["--timeout", "inf"], "number > 0"),
    (["--update-manifest", "--invariant", "token-cap"], "drop --invariant"),
    (["--policy", "no_such_module:Policy"], "cannot import policy module"),
])
def test_bad_usage_is_one_line(argv: list[str], words: str, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, *argv)
    assert code == 2 and out == "" and err.count("\n") == 1 and words in err


def test_emit_traces_never_overwrites(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["--policy", "fastdeploy-v0", "--invariant", "input-rows-cap", "--emit-traces", str(tmp_path / "out")]
    assert run(capsys, *argv)[0] == 0
    [written] = (tmp_path / "out").iterdir()
    before = written.read_text()
    code, out, err = run(capsys, *argv)
    assert code == 2 and "never overwrites" in err and written.read_text() == before
    assert load_trace(written).policy == "fastdeploy-v0"


def _user_policy(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, base: str) -> str:
    module, cls = base.rsplit(".", 1)
    name = f"proofs_user_{cls.lower()}"
    (tmp_path / f"{name}.py").write_text(f"from {module} import {cls}\n\nclass Mine({cls}):\n    name = 'mine'\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    return f"{name}:Mine"


@pytest.mark.parametrize("base, code", [
    ("tokenbudget.model.vllm.policies.VllmAdaptive", 0),
    ("tokenbudget.model.fastdeploy.policies.FastDeployV0", 1),
])
def test_a_user_policy_fails_on_a_refuted_ledger_invariant(base: str, code: int, tmp_path: Path,
                                                           monkeypatch: pytest.MonkeyPatch,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    policy = _user_policy(tmp_path, monkeypatch, base)
    got, out, _ = run(capsys, "--policy", policy, "--invariant", "input-rows-cap", "--invariant", "spec-shape",
                      "--json", "--emit-traces", str(tmp_path / "traces"))
    doc = json.loads(out)
    assert got == code and {o["policy"] for o in doc["outcomes"]} == {policy}
    for path in doc["traces_written"]:  # a user policy's traces name it by module path, so they replay
        assert load_trace(path).policy == policy and replay_on_model(load_trace(path)).ok


def test_exit_codes_as_a_process() -> None:
    proc = subprocess.run([sys.executable, "-m", "tokenbudget.cli", "prove", "--policy", "vllm-static",
                           "--invariant", "input-rows-cap"], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0 and proc.stderr == "", proc.stderr
