"""The vLLM 0.33.0 folder (``pip install --no-deps --target DIR vllm==0.33.0``) that the vllm
tests run beside the installed vLLM 0.32: ``TOKENBUDGET_VLLM033_PATH`` names it (.ci/run sets it)."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

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
