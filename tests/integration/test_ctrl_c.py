"""A real Ctrl-C (SIGINT to the command's process) stops ``check`` and ``prove`` wherever they are:
inside z3 (which takes the signal while it solves), in a fuzz session (which ends quietly on
it), or while worker processes prove. Exit 130 with what finished, and no process left."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable

import pytest

from tokenbudget.exits import INTERRUPTED

STOP_BOUND = 60  # seconds from SIGINT to exit: generous, a busy machine is slow (idle: under 1 s)


def children(pid: int) -> list[int]:
    """The live processes whose parent is ``pid``."""
    out = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid and fields[0] != "Z":
            out.append(int(stat.parent.name))
    return out


def interrupt(argv: list[str], ready: Callable[["subprocess.Popen[str]"], bool],
              tmp_path: Path) -> tuple[str, list[int]]:
    """Run the command, wait until ``ready``, send SIGINT; its stdout and the children it had."""
    env = {**os.environ, "TOKENBUDGET_DATABASE": str(tmp_path / "db")}
    # as from a shell: a SIGINT ignored by this test process (a background job) would be inherited
    proc = subprocess.Popen([sys.executable, "-m", "tokenbudget.cli", *argv], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    deadline = time.monotonic() + 600
    while not ready(proc):
        assert proc.poll() is None, f"{argv} ended before it was interrupted: {proc.stderr.read()[-2000:]}"
        assert time.monotonic() < deadline, f"{argv} never got ready"
        time.sleep(0.2)
    kids = children(proc.pid)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=STOP_BOUND)
    assert proc.returncode == INTERRUPTED, (proc.returncode, err[-2000:])
    assert "Traceback" not in err, err[-2000:]
    return out, kids


def assert_gone(pids: list[int]) -> None:
    time.sleep(0.5)
    alive = [pid for pid in pids if Path(f"/proc/{pid}").exists()
             and Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"]
    assert not alive, f"still running after the command exited: {alive}"


def test_ctrl_c_stops_prove_and_its_workers(tmp_path: Path) -> None:
    out, kids = interrupt(["prove"], lambda proc: len(children(proc.pid)) >= 2, tmp_path)
    assert kids and "interrupted (Ctrl-C):" in out and "policies proved" in out
    assert_gone(kids)


def loaded_for(proc: "subprocess.Popen[str]", since: list[float], seconds: float) -> bool:
    """Whether the command has run ``seconds`` past loading its modules (z3's library, which
    check and prove load with them): on a busy machine the imports alone take seconds."""
    try:
        loaded = "libz3" in Path(f"/proc/{proc.pid}/maps").read_text()
    except OSError:
        return False
    if loaded and not since:
        since.append(time.monotonic())
    return bool(since) and time.monotonic() - since[0] > seconds


def test_ctrl_c_stops_prove_in_its_own_process(tmp_path: Path) -> None:
    """One policy proves in the command's own process, mostly inside z3's solver."""
    since: list[float] = []
    out, _ = interrupt(["prove", "--policy", "vllm-adaptive"], lambda proc: loaded_for(proc, since, 1.0), tmp_path)
    assert "interrupted (Ctrl-C): 0 of 1 policies proved" in out


@pytest.mark.parametrize("after", [3, 12])  # the corpus and fuzz sections (proofs: the prove tests)
def test_ctrl_c_stops_check(tmp_path: Path, after: float) -> None:
    since: list[float] = []
    out, kids = interrupt(["check"], lambda proc: loaded_for(proc, since, after), tmp_path)
    verdict = out.splitlines()[-2] if out.splitlines()[-1].startswith("traces:") else out.splitlines()[-1]
    assert "interrupted (Ctrl-C) in the" in out and verdict.startswith(("verdict: interrupted", "verdict: FAIL")), out
    assert_gone(kids)
