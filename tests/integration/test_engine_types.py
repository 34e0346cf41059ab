"""The typed engine contract: mypy (``[tool.mypy]`` in pyproject.toml) checks the engine
interface (``harness/engine_target.py``), the descriptor and the registry, and each engine
package against them: a target whose driver or record drifts from the interface fails here."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.types


def test_the_engine_packages_meet_the_engine_contract(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, "-m", "mypy", "--cache-dir", str(tmp_path / "cache")], cwd=ROOT,
                          capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "no issues found" in done.stdout
