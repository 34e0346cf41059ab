"""TrtllmDifferentialTarget: TensorRT-LLM's scheduler.py (``TrtllmTarget``) judged in lockstep against
the model of the same policy (``harness.differential``): ``fuzz --target trtllm``."""
from __future__ import annotations

from pathlib import Path

from ...model import BudgetConfig, BudgetPolicy
from ..differential import Differential
from .target import TrtllmTarget


class TrtllmDifferentialTarget(Differential, TrtllmTarget):
    """TensorRT-LLM's scheduler judged in lockstep against the model; raises as ``TrtllmTarget``."""

    findings_engine, label = "tensorrt-llm", "TensorRT-LLM"

    def __init__(self, cfg: BudgetConfig, policy: BudgetPolicy, path: Path | None = None,
                 capacity: str | None = None) -> None:
        TrtllmTarget.__init__(self, cfg, policy, path, capacity)
        self.cfg = cfg
        self.start_reference(policy)
