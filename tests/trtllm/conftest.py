"""TensorRT-LLM's scheduler.py at 002f3cc3 (``../shared/engines/tensorrt-llm-002f3cc3.tar.gz`` unpacked
into .engines/, or the folder named by ``$TOKENBUDGET_TRTLLM_PATH``): the trtllm tests load it in the
test process, beside the stand-ins of ``tokenbudget/harness/trtllm/standins`` (nothing else imports
``tensorrt_llm``)."""
from __future__ import annotations

from pathlib import Path

import pytest

from tokenbudget.harness.trtllm.runtime import TrtllmUnavailable, check_folder


@pytest.fixture(scope="session")
def trtllm_folder() -> Path:
    """The folder holding scheduler.py; skips the test, saying why, when there is none."""
    try:
        return check_folder()
    except TrtllmUnavailable as exc:
        pytest.skip(str(exc))
