"""The pytest plugin (``tokenbudget.pytest_plugin``, a pytest11 entry point) is loaded by
every pytest run and does nothing unless ``--tokenbudget`` is given: no import of vLLM or
of the rest of tokenbudget, no session hooks. Its options are checked before any test."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

INERT = '''
import sys

def test_inert(pytestconfig):
    assert pytestconfig.pluginmanager.has_plugin("tokenbudget")  # the entry point is loaded
    assert not pytestconfig.pluginmanager.has_plugin("tokenbudget-session")
    loaded = sorted(m for m in sys.modules if m.startswith(("vllm", "tokenbudget.")))
    assert loaded == ["tokenbudget.pytest_plugin"], loaded
'''


def pytest_in(folder: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *args], cwd=folder,
                          capture_output=True, text=True, timeout=120)


def test_without_the_option_the_plugin_is_inert(tmp_path: Path) -> None:
    (tmp_path / "test_inert.py").write_text(INERT)
    done = pytest_in(tmp_path, "-p", "no:xdist", "test_inert.py")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "tokenbudget" not in done.stdout.split("passed")[-1]  # no summary section


def test_an_out_file_without_a_mode_is_a_usage_error(tmp_path: Path) -> None:
    (tmp_path / "test_inert.py").write_text(INERT)
    done = pytest_in(tmp_path, "--tokenbudget-out", str(tmp_path / "x.jsonl"), "test_inert.py")
    assert done.returncode == 4 and "--tokenbudget-out needs --tokenbudget" in done.stderr
