"""Conformance of the model's ``vllm-adaptive`` with the importable vLLM's scheduler
(``target.VllmTarget``), compared at the modelled version nearest to that vLLM, through the
shared ``harness.conform.run_conformance``; the divergences vLLM's findings explain are in
``known``."""
from __future__ import annotations

from ...model import BudgetConfig
from ...spec.trace import Trace
from ..conform import ConformEngine
from .workloads import POLICY, workload
from ..lockstep import Lockstep, run_lockstep
from .async_runner import deploys_async
from .engine import engine_version
from .known import explain
from .target import VllmTarget


def run_vllm_lockstep(trace: Trace) -> Lockstep:
    """The trace on the model and on the importable vLLM in lockstep, the model following the
    modelled version nearest to that vLLM whatever ``engine_version`` the trace names."""
    cfg = BudgetConfig.from_dict({**trace.config, "engine_version": engine_version().model_version})
    cfg = cfg.replace(async_scheduling=deploys_async(cfg.method, True))
    return run_lockstep(trace, VllmTarget, cfg)


def vllm_engine() -> ConformEngine:
    """The importable vLLM, compared with ``vllm-adaptive`` at the nearest modelled version.
    Raises EngineUnavailable without vLLM."""
    version = engine_version()
    return ConformEngine("vllm", "vLLM", version.release, version.model_version, version.warning, POLICY,
                         lambda seed, index: workload(seed, index, version.model_version), run_vllm_lockstep, explain)
