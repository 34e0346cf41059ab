"""SglangDifferentialTarget: SGLang 0.5.23's scheduler code (``SglangTarget``) judged in
lockstep against the model of the same policy (``harness.differential``): ``fuzz --target
sglang``. The model follows SGLang's one release, with the config's radix cache switch."""
from __future__ import annotations

from pathlib import Path

from ...model import BudgetConfig, BudgetPolicy
from ..differential import Differential
from .target import SglangTarget


class SglangDifferentialTarget(Differential, SglangTarget):
    """SGLang's scheduler judged in lockstep against the model; raises as ``SglangTarget``."""

    findings_engine, label = "sglang", "SGLang"

    def __init__(self, cfg: BudgetConfig, policy: BudgetPolicy, path: Path | None = None) -> None:
        SglangTarget.__init__(self, cfg, policy, path)
        self.cfg = cfg
        self.start_reference(policy)
