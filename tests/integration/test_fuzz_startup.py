"""``fuzz --seconds S`` is fuzzing time: a slow start-up (here a policy module slow to
import, as vLLM's is on a busy machine) is counted apart, so the run either fuzzes after it
or says "no evidence" with its own exit status; never ok on 0 examples. Each command runs in
a process of its own, through the command line; nothing here depends on how fast it runs."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tokenbudget.exits import NO_EVIDENCE, OK

POLICY = "slow_start_policies:SlowToImport"
HERE = Path(__file__).parent


def fuzz(*argv: str, **env: str) -> tuple[int, dict]:
    """``tokenbudget fuzz ... --json`` in a child process that can import this folder's policies."""
    environ = {**os.environ, **env,
               "PYTHONPATH": os.pathsep.join(filter(None, [str(HERE), os.environ.get("PYTHONPATH")]))}
    done = subprocess.run([sys.executable, "-m", "tokenbudget.cli", "fuzz", "--policy", POLICY, "--database", "none",
                           "--json", "--quiet", *argv], capture_output=True, text=True, env=environ, timeout=600)
    assert done.returncode in (OK, NO_EVIDENCE), done.stderr[-2000:]
    return done.returncode, json.loads(done.stdout)


@pytest.mark.parametrize("workers", ["1", "2"])
def test_a_slow_start_up_leaves_the_seconds_to_fuzzing_or_says_no_evidence(workers: str) -> None:
    code, doc = fuzz("--seconds", "1", "--workers", workers, TOKENBUDGET_TEST_IMPORT_SLEEP="4")
    report = doc["policies"][0]
    assert report["startup_seconds"] > 0 and "seconds" in report
    if code == OK:  # it fuzzed after the start-up: the ok rests on what ran
        assert doc["ok"] is True and doc["verdict"] == "ok" and report["no_evidence"] is None
        assert report["examples"] >= 1 and report["steps"] >= 1
    else:
        assert doc["ok"] is False and doc["verdict"] == "no evidence" and report["no_evidence"]


@pytest.mark.parametrize("workers", ["1", "2"])
def test_a_start_up_that_never_ends_is_stopped_and_is_no_evidence(workers: str) -> None:
    in_workers = {"TOKENBUDGET_TEST_IMPORT_SLEEP_IN_WORKERS": "1"} if workers != "1" else {}
    code, doc = fuzz("--seconds", "1", "--workers", workers, "--startup-seconds", "3",
                     TOKENBUDGET_TEST_IMPORT_SLEEP="100000", **in_workers)
    report = doc["policies"][0]
    assert code == NO_EVIDENCE and doc["ok"] is False and doc["verdict"] == "no evidence"
    assert report["examples"] == 0 and report["steps"] == 0 and report["startup_exceeded"] is True
    assert "ran past --startup-seconds 3" in report["no_evidence"]
