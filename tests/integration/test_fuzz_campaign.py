"""``tokenbudget fuzz --workers`` and ``tokenbudget campaign``: worker processes, one merged
report, a database that cannot be used, a campaign stopped and continued."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tokenbudget.cli import main
from tokenbudget.exits import NO_EVIDENCE
from tokenbudget.fuzz.coverage import PATHS

QUIET = "sglang-0.5.23"  # a policy the fuzzer finds nothing wrong with, fast (TensorRT-LLM's T1-T3 are drawn now)


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_two_workers_merge_into_one_report(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, "fuzz", "--policy", QUIET, "--examples", "10", "--workers", "2",
                         "--corpus", str(tmp_path), "--json")
    doc = json.loads(out)
    assert code == 0 and err == "" and doc["ok"] is True
    report = doc["policies"][0]
    assert report["examples"] > 10 and report["steps"] > 0  # each worker ran the ten
    assert set(report["coverage"]) <= set(PATHS) and list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("command", ["fuzz", "check", "campaign"])
@pytest.mark.parametrize("where, words", [
    ("redis://127.0.0.1:1/0", "cannot reach Redis"),
    ("redis://127.0.0.1/0", "expected redis://HOST:PORT/N"),
    ("ftp://127.0.0.1/", "expected a folder, redis://HOST:PORT/N or none"),
])
def test_a_database_that_cannot_be_used_exits_2_with_one_line(command: str, where: str, words: str,
                                                              tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    extra = ["--hours", "1", "--out", str(tmp_path)] if command == "campaign" else []
    code, out, err = run(capsys, command, "--policy", QUIET, "--database", where, *extra)
    assert code == 2 and out == "" and list(tmp_path.iterdir()) == []
    assert err.count("\n") == 1 and err.startswith("tokenbudget: error: ") and words in err, err


def _state(folder: Path) -> dict[str, object]:
    return dict(json.loads((folder / "state.json").read_text()))


HOURS = 0.001  # 3.6 s of fuzzing a run; its history has a point at its start and one at its end


def test_a_campaign_reports_and_continues_where_it_stopped(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out_dir = tmp_path / "campaign"
    argv = ["campaign", "--policy", QUIET, "--policy", "vllm-adaptive", "--workers", "1", "--out", str(out_dir),
            "--database", str(tmp_path / "examples"), "--json"]
    code, out, err = run(capsys, *argv, "--hours", str(HOURS))
    first = json.loads(out)
    ran = first["examples"] > 0 and first["steps"] > 0  # a busy machine may start no worker in time: no evidence
    assert (code in (0, 1) if ran else code == NO_EVIDENCE) and err == ""
    assert first["running"] is False and first["interrupted"] is False
    assert (out_dir / "report.png").stat().st_size > 0 and json.loads((out_dir / "report.json").read_text())["seconds"]
    before = _state(out_dir)
    assert before["seconds"] >= HOURS * 3600 and len(first["history"]) >= 2
    code, out, _ = run(capsys, *argv, "--hours", str(HOURS))  # spent already: a report, nothing run
    assert json.loads(out)["examples"] == first["examples"] and _state(out_dir)["rounds"] == before["rounds"]
    code, out, _ = run(capsys, *argv, "--hours", str(2 * HOURS))
    second = json.loads(out)
    after = _state(out_dir)
    assert second["seconds"] >= 2 * HOURS * 3600 and second["examples"] >= first["examples"]
    assert after["rounds"].get("0", 0) >= before["rounds"].get("0", 0)  # type: ignore[union-attr]
    assert len(second["history"]) > len(first["history"]) and second["history"][:len(first["history"])] == first["history"]


def test_ctrl_c_ends_a_campaign_with_its_report_and_it_resumes(tmp_path: Path) -> None:
    out_dir = tmp_path / "campaign"
    argv = [sys.executable, "-m", "tokenbudget.cli", "campaign", "--policy", QUIET, "--workers", "1",
            "--out", str(out_dir), "--database", "none", "--hours", "1", "--json"]
    # as from a shell: a SIGINT ignored by this test process would be inherited, and Python then never raises it
    process = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    for _ in range(600):  # the first report is written about 5 s in
        if (out_dir / "state.json").exists() or process.poll() is not None:
            break
        time.sleep(0.1)
    process.send_signal(signal.SIGINT)
    out, err = process.communicate(timeout=600)  # a guard against a hang; a busy machine is slow
    doc = json.loads(out)
    assert process.returncode == 130 and doc["interrupted"] is True and doc["running"] is False, err
    stopped = _state(out_dir)
    assert 0 < float(stopped["seconds"]) < 3600  # type: ignore[arg-type]
    resumed = subprocess.run([*argv[:-3], "--hours", str((float(stopped["seconds"]) + 2) / 3600), "--json"],  # type: ignore[arg-type]
                             capture_output=True, text=True, timeout=300, env=os.environ)
    doc = json.loads(resumed.stdout)
    ran = doc["examples"] > 0 and doc["steps"] > 0  # a busy machine may spawn no worker in the 2 s: no evidence
    assert resumed.returncode == (0 if ran else NO_EVIDENCE) and doc["seconds"] > float(stopped["seconds"])  # type: ignore[arg-type]
    assert doc["history"][:len(stopped["history"])] == stopped["history"]  # type: ignore[arg-type]


def _state_and_parent(pid: int | str) -> tuple[str, int] | None:
    """A process's state letter and parent pid from /proc; None once it is gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return fields[0], int(fields[1])


def _is_running(pid: int) -> bool:
    """Alive, and not a zombie waiting to be reaped."""
    seen = _state_and_parent(pid)
    return seen is not None and seen[0] != "Z"


def _workers_of(pid: int) -> list[int]:
    """The running worker processes (multiprocessing spawns) whose parent is ``pid``."""
    found = []
    for folder in Path("/proc").glob("[0-9]*"):
        seen = _state_and_parent(folder.name)
        if seen is None or seen[1] != pid or seen[0] == "Z":
            continue
        try:
            if b"spawn_main" in (folder / "cmdline").read_bytes():
                found.append(int(folder.name))
        except OSError:  # the process ended while it was read
            continue
    return found


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads the process table from /proc")
@pytest.mark.parametrize("command", ["fuzz", "campaign"])
def test_workers_end_when_their_parent_is_killed(tmp_path: Path, command: str) -> None:
    """A SIGKILL skips the parent's cleanup, which ends its daemonic workers: they must not
    fuzz on alone, at full CPU, until the deadline an hour away."""
    extra = ["--hours", "1", "--out", str(tmp_path / "c")] if command == "campaign" else ["--seconds", "3600"]
    process = subprocess.Popen([sys.executable, "-m", "tokenbudget.cli", command, "--policy", QUIET, "--workers", "2",
                                "--database", "none", "--quiet", *extra],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    workers: list[int] = []
    for _ in range(600):  # spawning and importing take a few seconds; a busy machine is slow
        workers = _workers_of(process.pid)
        if len(workers) == 2 or process.poll() is not None:
            break
        time.sleep(0.1)
    assert len(workers) == 2, f"{command} did not start 2 workers"
    time.sleep(1.0)  # under way
    process.kill()
    process.wait(timeout=60)
    for _ in range(600):
        if not any(_is_running(w) for w in workers):
            break
        time.sleep(0.1)
    left = [w for w in workers if _is_running(w)]
    for w in left:  # do not leave them to the rest of the suite
        os.kill(w, signal.SIGKILL)
    assert not left, f"{command}'s workers {left} outlived their killed parent"
