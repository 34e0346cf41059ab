"""``--engine-path``: bad folders and a vLLM the harness cannot drive are one line, exit 2."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path


def tokenbudget(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "tokenbudget.cli", *args], capture_output=True, text=True,
                          timeout=300, check=False)


def one_error_line(done: subprocess.CompletedProcess[str]) -> str:
    """The one error line, last on stderr; before it at most the engine's banner (release, folder, model)."""
    assert done.returncode == 2 and done.stdout == "", (done.returncode, done.stdout)
    lines = done.stderr.strip().splitlines()
    errors = [line for line in lines if line.startswith("tokenbudget: error: ")]
    assert len(errors) == 1 and lines[-1] == errors[0] and "Traceback" not in done.stderr, done.stderr
    return errors[0]


def test_a_folder_without_vllm_is_refused_before_anything_runs(tmp_path: Path) -> None:
    line = one_error_line(tokenbudget("conform", "--engine-path", str(tmp_path), "--workloads", "1"))
    assert "holds no vllm package" in line and str(tmp_path) in line


def test_engine_path_needs_the_vllm_target(tmp_path: Path) -> None:
    (tmp_path / "vllm").mkdir()
    (tmp_path / "vllm" / "__init__.py").write_text("")
    trace = Path(__file__).resolve().parents[2] / "tokenbudget" / "corpus" / "seed-000-vllm-adaptive.json"
    line = one_error_line(tokenbudget("replay", str(trace), "--engine-path", str(tmp_path)))
    assert "--target vllm" in line


def test_a_vllm_whose_internals_moved_fails_naming_what_is_missing(tmp_path: Path) -> None:
    """A future vLLM: the scheduler imports, but a config class the harness builds is gone."""
    sched = tmp_path / "vllm" / "v1" / "core" / "sched"
    sched.mkdir(parents=True)
    (tmp_path / "vllm" / "__init__.py").write_text('__version__ = "0.99.0"\n')
    for folder in (tmp_path / "vllm" / "v1", tmp_path / "vllm" / "v1" / "core", sched):
        (folder / "__init__.py").touch()
    (sched / "scheduler.py").write_text("class Scheduler:\n    pass\n")
    (tmp_path / "vllm" / "v1" / "kv_cache_interface.py").write_text("class KVCacheConfig:\n    pass\n")
    line = one_error_line(tokenbudget("conform", "--engine-path", str(tmp_path), "--workloads", "1"))
    assert "vLLM 0.99.0" in line and "FullAttentionSpec" in line and "0.32, 0.33 and 0.34" in line, line


def test_conform_on_no_workloads_is_refused_not_judged() -> None:
    """Zero workloads would print an agreement of 0/0 and the verdict ok: a verdict on no evidence."""
    line = one_error_line(tokenbudget("conform", "--engine", "sglang", "--workloads", "0"))
    assert "--workloads" in line and "expected a number > 0" in line


def failing_package(root: Path, package: str, *files: str) -> Path:
    """A folder whose ``package`` raises RuntimeError when imported (a platform check, a
    missing device), with the files the engine's folder check looks for."""
    (root / package).mkdir(parents=True)
    (root / package / "__init__.py").write_text('__version__ = "9.9.9"\nraise RuntimeError("needs a device this machine lacks")\n')
    for name in files:
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).touch()
    return root


def test_a_vllm_that_cannot_start_is_one_line_naming_it(tmp_path: Path) -> None:
    line = one_error_line(tokenbudget("fuzz", "--target", "vllm", "--engine-path", str(failing_package(tmp_path, "vllm")),
                                      "--examples", "1"))
    assert "vllm is not importable (RuntimeError: needs a device this machine lacks)" in line, line


def test_an_sglang_that_cannot_start_is_one_line_naming_it(tmp_path: Path) -> None:
    line = one_error_line(tokenbudget("conform", "--engine", "sglang", "--engine-path",
                                      str(failing_package(tmp_path, "sglang")), "--workloads", "1"))
    assert "SGLang" in line and "needs a device this machine lacks" in line, line


def test_a_fastdeploy_that_cannot_start_is_one_line_naming_it(tmp_path: Path) -> None:
    folder = failing_package(tmp_path, "fastdeploy", "fastdeploy/engine/sched/resource_manager_v1.py")
    line = one_error_line(tokenbudget("conform", "--engine", "fastdeploy", "--engine-path", str(folder),
                                      "--workloads", "1"))
    assert "FastDeploy" in line and "needs a device this machine lacks" in line, line
