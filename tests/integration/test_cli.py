"""The tokenbudget command: exit codes 0/1/2, one-line errors, --json as the only stdout."""
from __future__ import annotations

import io
import math
import json
import subprocess
import sys
from contextlib import redirect_stderr, redirect_stdout
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator, Sequence

import pytest

from tokenbudget import check, check_cmd, console
from tokenbudget.check import CheckReport, run_check
from tokenbudget.cli import main
from tokenbudget.model import builtin_policies
from tokenbudget.proofs.obligations import Options
from tokenbudget.proofs.verdicts import Outcome
from tokenbudget.spec import INVARIANTS
from tokenbudget.spec.corpus import corpus_paths
from tokenbudget.spec.trace import load_trace

CORPUS = {p.stem: p for p in corpus_paths()}
SEED = str(CORPUS["seed-000-vllm-adaptive"])
FD_OVERFLOW = CORPUS["fastdeploy-reserve-rows-overflow"]


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def without_expectations(tmp_path: Path, source: Path) -> Path:
    doc = json.loads(source.read_text())
    del doc["expect"]
    path = tmp_path / source.name
    path.write_text(json.dumps(doc))
    return path


def assert_usage_error(code: int, out: str, err: str, words: str) -> None:
    assert code == 2
    assert out == ""
    assert err.count("\n") == 1 and err.startswith("tokenbudget: error: "), err
    assert words in err


# -- policies ---------------------------------------------------------------------------
def test_policies_lists_every_builtin(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, "policies")
    assert code == 0 and err == ""
    assert len(builtin_policies()) == 14
    for name, cls in builtin_policies().items():
        assert name in out and cls.version in out


def test_python_dash_m_runs_the_same_command(capsys: pytest.CaptureFixture[str]) -> None:
    proc = subprocess.run([sys.executable, "-m", "tokenbudget", "policies", "--json"], capture_output=True, text=True,
                          timeout=300)
    code, out, _ = run(capsys, "policies", "--json")
    assert (proc.returncode, json.loads(proc.stdout)) == (code, json.loads(out))


def test_policies_json(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "policies", "--json")
    rows = json.loads(out)["policies"]
    assert code == 0 and [r["name"] for r in rows] == list(builtin_policies())
    assert set(rows[0]) == {"name", "engine", "version", "models", "description"}
    assert rows[0]["models"] == "0.32, 0.33, 0.34" and rows[-1]["models"] == "-"  # vllm-adaptive; a FastDeploy policy


# -- replay -----------------------------------------------------------------------------
def test_replay_seed_000_shows_the_grants(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, "replay", SEED)
    assert code == 0 and err == ""
    assert "0:10 1:4" in out
    assert 'num_scheduled_tokens {"0": 10, "1": 4}' in out
    assert "verdict: ok" in out


def test_a_replay_says_how_far_it_is_when_stderr_is_not_a_terminal(capsys: pytest.CaptureFixture[str],
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(console, "EVERY", 0.0)  # every progress message becomes a line
    code, out, err = run(capsys, "replay", SEED)
    lines = err.splitlines()
    assert code == 0 and "verdict: ok" in out
    assert lines[0] == f"tokenbudget: replaying 1/1: {SEED}: op 0 of {len(load_trace(SEED).ops)}, step 0"
    assert lines[-1].startswith(f"tokenbudget: replaying 1/1: {SEED}: judging ") and lines[-1].endswith(" steps")


def test_replay_json_is_the_only_stdout(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, "replay", SEED, str(FD_OVERFLOW), "--json")
    doc = json.loads(out)
    assert code == 1 and err == "" and doc["ok"] is False
    assert [t["ok"] for t in doc["traces"]] == [True, True]  # both as expected; one shows a violation
    seed = doc["traces"][0]
    assert seed["steps"][0]["num_scheduled_tokens"] == {"0": 10, "1": 4}
    assert seed["steps"][0]["rows"] == seed["steps"][0]["row_cap"] == 20
    assert all(e["met"] for e in seed["expectations"])
    assert doc["traces"][1]["violations"][0]["invariant"] == "input-rows-cap"


def test_fastdeploy_overflow_without_expectations_exits_1(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "replay", str(without_expectations(tmp_path, FD_OVERFLOW)))
    assert code == 1
    assert "input-rows-cap: step 2: the runner needs 528 rows, B = 520" in out
    assert "verdict: FAIL" in out


def test_shipped_fastdeploy_overflow_is_an_expected_violation(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "replay", str(FD_OVERFLOW))
    assert code == 1
    assert "input-rows-cap violated (steps 2)" in out
    assert "verdict: violated, as expected (input-rows-cap)" in out


def test_policy_override_that_refuses_the_config_is_bad_input(capsys: pytest.CaptureFixture[str]) -> None:
    assert_usage_error(*run(capsys, "replay", SEED, "--policy", "vllm-static"), "vllm-static refuses the config")


def test_policy_override_that_accepts_a_refused_config_fails(capsys: pytest.CaptureFixture[str]) -> None:
    refused = str(CORPUS["seed-000-vllm-static-refused"])
    code, out, _ = run(capsys, "replay", refused, "--policy", "vllm-adaptive")
    assert code == 1 and "the config was accepted" in out


def test_malformed_trace_exits_2_with_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text('{"format": "tokenbudget.trace/1", "policy": "vllm-adaptive", "config": {},\n'
                   ' "ops": [{"op": "add", "id": "0", "prompt_len": true, "max_tokens": 4}]}')
    assert_usage_error(*run(capsys, "replay", SEED, str(bad)), f"{bad}: ops[0].prompt_len: expected an integer")


def test_bad_json_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text("{\n  nope")
    assert_usage_error(*run(capsys, "replay", str(bad), "--json"), "invalid JSON at line 2")


def test_request_the_scheduler_refuses_names_the_op(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    doc = json.loads(Path(SEED).read_text())
    doc["ops"][1]["prompt_len"] = 64  # max_model_len is 64
    path = tmp_path / "long.json"
    path.write_text(json.dumps(doc))
    assert_usage_error(*run(capsys, "replay", str(path)), f"{path}: ops[1]: request '1': prompt_len")


def test_invalid_config_value_is_bad_input(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    doc = json.loads(Path(SEED).read_text())
    doc["config"]["method"] = "medusa"
    path = tmp_path / "medusa.json"
    path.write_text(json.dumps(doc))
    assert_usage_error(*run(capsys, "replay", str(path)), f"{path}: invalid config: unknown method 'medusa'")


def test_unmet_step_expectation_exits_1(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    doc = json.loads(Path(SEED).read_text())
    doc["expect"][0]["num_scheduled_tokens"] = {"0": 10, "1": 5}
    path = tmp_path / "wrong.json"
    path.write_text(json.dumps(doc))
    code, out, _ = run(capsys, "replay", str(path))
    assert code == 1
    assert 'UNMET  step 0: num_scheduled_tokens {"0": 10, "1": 4}, expected {"0": 10, "1": 5}' in out


@pytest.mark.parametrize("argv, words", [
    (["replay", "missing.json"], "missing.json: cannot read it (No such file or directory); give a trace file"),
    (["replay", "."], ".: it is a folder, not a trace file; give a trace file"),
    (["replay", SEED, "--mode", "sideways"], "invalid choice: 'sideways'"),
    (["replay", SEED, "--policy", "no-such-policy"], "unknown policy 'no-such-policy'"),
    (["replay"], "required: TRACE"),
    (["frobnicate"], "invalid choice: 'frobnicate'"),
    ([], "required: COMMAND"),
    (["check", "--policy", "no-such-policy"], "unknown policy 'no-such-policy'"),
    (["check", "--policy", "no_such_module:Policy"], "cannot import policy module 'no_such_module'"),
])
def test_bad_usage_exits_2_with_one_line(capsys: pytest.CaptureFixture[str], argv: list[str], words: str) -> None:
    assert_usage_error(*run(capsys, *argv), words)


def test_device_and_mode_are_refused_on_the_model_target(capsys: pytest.CaptureFixture[str]) -> None:
    assert_usage_error(*run(capsys, "replay", SEED, "--device", "cuda", "--mode", "live"), "--target runner")


def test_help_exits_0(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "check", "--help")
    assert code == 0 and "pkg.module:Class" in out


# -- check ------------------------------------------------------------------------------
USER_BASES = {"overflowing": "tokenbudget.model.fastdeploy.policies.FastDeployV0",
              "safe": "tokenbudget.model.vllm.policies.VllmAdaptive"}


@dataclass
class CheckRun:
    """One ``tokenbudget check`` of every built-in and two user policies, printed as text and as JSON."""
    users: dict[str, str]  # kind -> the user policy's spec
    code: int
    out: str
    err: str
    json_code: int
    doc: dict[str, Any]

    def row(self, policy: str) -> dict[str, Any]:
        return next(r for r in self.doc["policies"] if r["policy"] == policy)


@pytest.fixture(scope="module")
def check_run(tmp_path_factory: pytest.TempPathFactory, builtin_proofs: list[Outcome]) -> Iterator[CheckRun]:
    folder = tmp_path_factory.mktemp("user_policies")
    users = {}
    for kind, base in USER_BASES.items():
        module, cls = base.rsplit(".", 1)
        name = f"user_policy_{cls.lower()}"  # one module name per base: imports are cached
        (folder / f"{name}.py").write_text(f"from {module} import {cls}\n\nclass Mine({cls}):\n    name = 'mine'\n")
        users[kind] = f"{name}:Mine"
    argv = ["check", *[a for p in [*builtin_policies(), *users.values()] for a in ("--policy", p)]]
    reports: list[CheckReport] = []

    def run_once(policies: Sequence[str], progress: Callable[[str], None], database: object,
                 *verdict_options: Any) -> CheckReport:
        if not reports:  # the check runs once; the --json run prints the same report
            reports.append(run_check(policies, progress, database, *verdict_options))
        return reports[0]

    def prove_builtins_once(policies: Sequence[str], options: Options, *args: Any, **kwargs: Any) -> list[Outcome]:
        """The session's proofs of the built-ins (the same ``prove``, run once), the others proved here."""
        rest = [p for p in policies if p not in builtin_policies()]
        return [o for o in builtin_proofs if o.policy in policies] + real_prove(rest, options, *args, **kwargs)

    real_prove = check.prove
    with pytest.MonkeyPatch.context() as mp:
        mp.syspath_prepend(str(folder))
        mp.setattr(check_cmd, "run_check", run_once)
        mp.setattr(check, "prove", prove_builtins_once)
        mp.setattr(console, "EVERY", math.inf)  # the module-scoped run comes before the per-test fixture
        with redirect_stdout(io.StringIO()) as out, redirect_stderr(io.StringIO()) as err:
            code = main(argv)
            text, errors = out.getvalue(), err.getvalue()
            out.truncate(0)
            out.seek(0)
            json_code = main([*argv, "--json"])
            doc = json.loads(out.getvalue())
        yield CheckRun(users, code, text, errors + err.getvalue(), json_code, doc)


def test_check_fails_only_on_the_overflowing_user_policy(check_run: CheckRun) -> None:
    assert check_run.code == check_run.json_code == 1 and check_run.err == ""
    failed = [r["policy"] for r in check_run.doc["policies"] if not r["ok"]]
    assert failed == [check_run.users["overflowing"]] and check_run.doc["ok"] is False
    assert "verdict: FAIL" in check_run.out


def test_check_builtin_corpus_is_ok(check_run: CheckRun) -> None:
    lines = check_run.out.splitlines()
    for name in builtin_policies():
        row = next(line for line in lines if line.startswith(f"{name} "))
        assert row.endswith("ok"), row
    row = next(line for line in lines if line.startswith("fastdeploy-reserve "))
    assert "VIOLATED" in row


def test_check_json_matrix(check_run: CheckRun) -> None:
    doc = check_run.doc
    assert [i["id"] for i in doc["invariants"]] == list(INVARIANTS)
    assert [r["policy"] for r in doc["policies"]] == [*builtin_policies(), *check_run.users.values()]
    assert all(check_run.row(name)["ok"] and not check_run.row(name)["user"] for name in builtin_policies())
    assert check_run.row("fastdeploy-v0")["cells"]["input-rows-cap"] == "VIOLATED"
    assert check_run.row("vllm-adaptive")["cells"]["input-rows-cap"] == "ok"
    assert check_run.row("vllm-adaptive")["cells"]["config-sound"] == "VIOLATED"  # refuted by `tokenbudget prove`


def test_check_user_policy_that_overflows_fails(check_run: CheckRun) -> None:
    row = check_run.row(check_run.users["overflowing"])
    assert row["user"] is True and row["ok"] is False
    assert row["cells"]["input-rows-cap"] == "UNEXPECTED"
    assert any("input-rows-cap" in f for f in row["failures"])
    assert check_run.doc["skipped"], "configs the FastDeploy policy refuses are skipped"


def test_check_safe_user_policy_is_ok(check_run: CheckRun) -> None:
    row = check_run.row(check_run.users["safe"])
    assert row["user"] is True and row["ok"] is True and not row["failures"]
    line = next(line for line in check_run.out.splitlines() if line.startswith(check_run.users["safe"]))
    assert line.endswith("ok")


# -- as a process -----------------------------------------------------------------------
@pytest.mark.parametrize("argv, expected", [
    (["replay", SEED], 0),
    (["replay", "--policy", "vllm-adaptive", str(CORPUS["seed-000-vllm-static-refused"])], 1),
    (["replay", "missing.json"], 2),
])
def test_exit_codes_as_a_process(argv: list[str], expected: int) -> None:
    proc = subprocess.run([sys.executable, "-m", "tokenbudget.cli", *argv], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == expected, proc.stderr
    assert "Traceback" not in proc.stderr
    if expected == 2:
        assert proc.stdout == "" and proc.stderr.count("\n") == 1
    else:
        assert proc.stderr == ""
