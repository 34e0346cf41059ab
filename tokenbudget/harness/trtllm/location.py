"""Where TensorRT-LLM's scheduler.py is looked for: ``--engine-path DIR``, else
``$TOKENBUDGET_TRTLLM_PATH``, else ``.engines/tensorrt-llm-002f3cc3`` in the repository root
(the unpacked archive of the commit the model follows)."""
from __future__ import annotations

from pathlib import Path

COMMIT = "002f3cc3"
PATH_ENV = "TOKENBUDGET_TRTLLM_PATH"
DEFAULT_PATH = Path(__file__).resolve().parents[3] / ".engines" / f"tensorrt-llm-{COMMIT}"
