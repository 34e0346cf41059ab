"""SGLang 0.5.23 (``pip install --no-deps --target .engines/sglang-0.5.23 sglang==0.5.23``,
or the folder named by ``$TOKENBUDGET_SGLANG_PATH``): the sglang tests run it in child
processes, never in the test process (its torchvision stub stays where SGLang is loaded)."""
from __future__ import annotations

from pathlib import Path

import pytest

from tokenbudget.harness.sglang.runtime import SglangUnavailable, check_folder


@pytest.fixture(scope="session")
def sglang_folder() -> Path:
    """The SGLang folder; skips the test, saying why, when it holds no sglang package."""
    try:
        return check_folder()
    except SglangUnavailable as exc:
        pytest.skip(str(exc))
