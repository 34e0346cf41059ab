"""DifferentialTarget: vLLM's real scheduler (``VllmTarget``) judged in lockstep against the
model of the same policy at the modelled version nearest to the vLLM driven
(``harness.differential``): ``fuzz --target vllm``."""
from __future__ import annotations

from ...model import BudgetConfig, BudgetPolicy
from ..differential import Differential
from .target import VllmTarget


class DifferentialTarget(Differential, VllmTarget):
    """vLLM's scheduler judged in lockstep against the model; raises as ``VllmTarget``."""

    findings_engine, label = "vllm", "vLLM"

    def __init__(self, cfg: BudgetConfig, policy: BudgetPolicy, validate: bool = True) -> None:
        VllmTarget.__init__(self, cfg, policy, validate)
        self.start_reference(policy)
