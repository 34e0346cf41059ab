"""Shared by the tests that need vLLM: the findings they run."""
from __future__ import annotations

from tokenbudget.model.findings import FINDINGS, findings_of

F1_TRACE, F2_TRACE = FINDINGS["F1"].trace_path, FINDINGS["F2"].trace_path
RAISING_FINDINGS = [f for f in findings_of("vllm") if f.engine_raises]  # a divergence in conformance
AGREEING_FINDINGS = [f for f in findings_of("vllm") if not f.engine_raises]  # vLLM does the same

