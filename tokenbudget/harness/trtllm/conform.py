"""Conformance of the model's ``trtllm`` with TensorRT-LLM's own scheduler.py (``target.TrtllmTarget``)
under one capacity policy (the workloads' ``engine_version``, ``model.trtllm.deployments``), over seeded
workloads (``workloads``), through the shared ``harness.conform.run_conformance``."""
from __future__ import annotations

from functools import partial
from pathlib import Path

from ...model import get_policy
from ...spec.trace import Trace
from ..conform import ConformEngine
from ..engine_descriptor import Modelled
from ..lockstep import Lockstep, run_lockstep
from . import runtime
from ...model.trtllm.deployments import GUARANTEED_NO_EVICT
from .known import explain
from .target import TrtllmTarget
from .workloads import POLICY, workload


def modelled(path: Path | None = None, policy: str = POLICY) -> Modelled:
    """scheduler.py's release in ``path`` (see ``runtime.engine_folder``), its folder, and the model of
    ``policy`` compared with it. Raises TrtllmUnavailable without it."""
    trt = runtime.load(path)
    model = get_policy(policy)
    warning = None if trt["release"].startswith(runtime.COMMIT) else (
        f"TensorRT-LLM {trt['release']} is not the modelled commit {runtime.COMMIT}; the model follows it")
    return Modelled(trt["release"], policy, f"{getattr(model, 'commit', runtime.COMMIT)} ({model.version})", warning,
                    str(trt["folder"]))


def trtllm_engine(path: Path | None = None, capacity: str = GUARANTEED_NO_EVICT, policy: str = POLICY) -> ConformEngine:
    """scheduler.py in ``path`` under ``capacity`` against the model's ``policy``. Raises TrtllmUnavailable
    without it."""
    seen = modelled(path, policy)
    folder = runtime.load(path)["folder"]

    def lockstep(trace: Trace) -> Lockstep:
        return run_lockstep(trace, partial(TrtllmTarget, path=folder))

    return ConformEngine("trtllm", "TensorRT-LLM", f"{seen.release} ({capacity})", seen.model_version, seen.warning,
                         policy, lambda seed, index: workload(seed, index, capacity, policy), lockstep, explain)
