"""A user policy that exits, stops, holds or kills the process running it gets the verdict
``policy-error``, never a pass, another exit status or a hang: one test per way, through
the commands in-process (``tokenbudget.cli.main``), fuzz's worker processes included."""
from __future__ import annotations

import io
import json
import os
import sys
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path
from typing import Any

import pytest

from tokenbudget.cli import main
from tokenbudget.exits import BAD_INPUT, FAILED
from tokenbudget.spec.corpus import corpus_paths

sys.path.insert(0, str(Path(__file__).parent))  # hostile_policies, exits_on_import, for --policy
SEED = next(p for p in corpus_paths() if p.stem == "seed-000-vllm-adaptive")
TIMEOUT = "0.5"  # --policy-timeout, seconds


def run_cli(*argv: Any) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        code = main([str(a) for a in argv])
    assert "Traceback" not in out.getvalue() + err.getvalue(), err.getvalue()[-2000:]
    return code, out.getvalue(), err.getvalue()


# policy, the method the policy-error line names, what it says the method did
HOSTILE = [
    ("ExitsZero", "ExitsZero.grant", "called sys.exit(0)"),
    ("ExitsThree", "ExitsThree.grant", "called sys.exit(3)"),
    ("HardExit", "HardExit.grant", "called os._exit(0)"),
    ("RaisesKeyboardInterrupt", "RaisesKeyboardInterrupt.grant", "raised KeyboardInterrupt"),
    ("GrantsTrue", "GrantsTrue.grant", "returned bool True, expected an int"),
    ("Spins", "Spins.grant", f"did not return within {TIMEOUT} s"),
    ("Sleeps", "Sleeps.grant", f"did not return within {TIMEOUT} s"),
    ("SwallowsTheTimeout", "SwallowsTheTimeout.grant", f"did not return within {TIMEOUT} s"),
    ("LoopSpins", "SpinningLoop.running_grant", f"did not return within {TIMEOUT} s"),
    ("LoopExits", "ExitingLoop.running_grant", "called sys.exit(0)"),
]


@pytest.mark.parametrize("name, method, did", HOSTILE)
def test_replay_gives_a_policy_error_naming_what_the_policy_did(name: str, method: str, did: str) -> None:
    code, out, _ = run_cli("replay", SEED, "--policy", f"hostile_policies:{name}", "--policy-timeout", TIMEOUT)
    assert code == FAILED and "verdict: policy-error" in out
    assert f"policy-error: {method} (" in out and "hostile_policies.py:" in out and did in out


@pytest.mark.parametrize("name, method, did", [HOSTILE[0], HOSTILE[2], HOSTILE[3], HOSTILE[5]])
def test_fuzz_workers_report_it_as_found(tmp_path: Path, name: str, method: str, did: str) -> None:
    code, out, _ = run_cli("fuzz", "--policy", f"hostile_policies:{name}", "--examples", "2", "--workers", "2",
                           "--database", "none", "--corpus", tmp_path, "--policy-timeout", TIMEOUT, "--json")
    found = json.loads(out)["policies"][0]["violations"]
    assert code == FAILED and list(found) == ["policy-error"] and did in found["policy-error"]["message"]


def test_a_fuzz_worker_killed_inside_the_policy_is_its_policy_error(tmp_path: Path) -> None:
    code, out, _ = run_cli("fuzz", "--policy", "hostile_policies:KillsItsProcess", "--examples", "2", "--workers",
                           "2", "--database", "none", "--corpus", tmp_path)
    assert code == FAILED and "verdict: policy-error" in out
    assert "died (killed by signal 9) while it fuzzed hostile_policies:KillsItsProcess" in out


def test_check_and_prove_fail_a_hanging_policy_within_the_limit() -> None:
    code, out, _ = run_cli("check", "--policy", "hostile_policies:Spins", "--policy-timeout", TIMEOUT, "--json")
    row = json.loads(out)["policies"][0]
    assert code == FAILED and not row["ok"] and any("did not return within" in f for f in row["failures"])
    code, _, err = run_cli("prove", "--policy", "hostile_policies:Spins", "--policy-timeout", TIMEOUT)
    assert code == BAD_INPUT and "Spins.grant" in err and "did not return within" in err


def test_a_module_that_exits_on_import_is_one_error_line() -> None:
    code, out, err = run_cli("replay", SEED, "--policy", "exits_on_import:Policy")
    assert code == BAD_INPUT and out == ""
    assert err.count("\n") == 1 and "importing policy module 'exits_on_import' called sys.exit(0)" in err


@pytest.mark.parametrize("value", ["0", "-1", "nan", "inf", "1e9", "soon"])
def test_a_nonsense_policy_timeout_is_one_error_line(value: str) -> None:
    code, out, err = run_cli("replay", SEED, "--policy-timeout", value)
    assert code == BAD_INPUT and out == "" and err.count("\n") == 1 and "--policy-timeout" in err
