"""Conformance of the model's ``sglang-0.5.23`` with SGLang 0.5.23's own scheduler code
(``target.SglangTarget``) over seeded workloads (``workloads``), through the shared
``harness.conform.run_conformance``."""
from __future__ import annotations

from functools import partial
from pathlib import Path

from ...model import get_policy
from ...spec.trace import Trace
from ..conform import ConformEngine
from ..lockstep import Lockstep, run_lockstep
from . import runtime
from .known import explain
from .target import SglangTarget
from .workloads import POLICY, workload


def sglang_engine(path: Path | None = None, policy: str = POLICY, radix: bool = True) -> ConformEngine:
    """SGLang in ``path`` (see ``runtime.engine_folder``) against the model's ``policy``, on
    workloads with the radix cache on (SGLang's default) or off. Raises SglangUnavailable
    without SGLang."""
    sg = runtime.load(path)

    def lockstep(trace: Trace) -> Lockstep:
        return run_lockstep(trace, partial(SglangTarget, path=path))

    return ConformEngine("sglang", "SGLang", sg["version"], get_policy(policy).version, None, policy,
                         lambda seed, index: workload(seed, index, policy, radix), lockstep, explain)
