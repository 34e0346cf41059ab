"""TensorRT-LLM's Python schedulers (scheduler.py: PyCapacityScheduler, PyMicroBatchScheduler)
as a target; ``ENGINE`` describes it to the commands (``harness.registry``). It runs in this
process: the stand-ins publish only ``tensorrt_llm.*`` names (``runtime``)."""
from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Optional

from ...model.trtllm.deployments import GUARANTEED_NO_EVICT, MAX_REQUESTS, MAX_UTILIZATION
from ..engine_descriptor import CONFORM, FUZZ, REPLAY, EngineDescriptor, Modelled
from .location import PATH_ENV

if TYPE_CHECKING:
    from ...model import BudgetPolicy
    from ...model.target import TargetFactory
    from ..conform import ConformEngine


class TrtllmDescriptor(EngineDescriptor):
    name, label = "trtllm", "TensorRT-LLM"
    supports = frozenset({FUZZ, REPLAY, CONFORM})
    path_env = PATH_ENV
    folder_help = ("a folder holding tensorrt_llm/ (an install's site-packages, or the unpacked archive; default "
                   "$TOKENBUDGET_TRTLLM_PATH, else .engines/tensorrt-llm-002f3cc3)")
    target_help = "TensorRT-LLM's scheduler.py under the capacity policy the config's engine_version names"
    capacity_policies = (GUARANTEED_NO_EVICT, MAX_UTILIZATION, MAX_REQUESTS)

    def check_folder(self, path: Optional[Path]) -> Optional[Path]:
        from .runtime import check_folder
        return check_folder(path)

    def child_env(self, path: Optional[Path]) -> Optional[dict[str, str]]:
        """None: it runs here; a given folder becomes this process's ``PATH_ENV`` for the targets."""
        if path is not None:
            os.environ[PATH_ENV] = str(self.check_folder(path))
        return None

    def modelled(self, path: Optional[Path]) -> Modelled:
        from .conform import modelled
        return modelled(self.check_folder(path))

    def check_policy(self, policy: BudgetPolicy) -> None:
        from ...model import BudgetConfig
        from .differential import TrtllmDifferentialTarget
        TrtllmDifferentialTarget(BudgetConfig(enable_prefix_caching=False), policy)

    def fuzz_target(self) -> TargetFactory:
        from .differential import TrtllmDifferentialTarget
        return TrtllmDifferentialTarget

    def replay_target(self) -> TargetFactory:
        from .target import TrtllmTarget
        return TrtllmTarget

    def conform_engine(self, path: Optional[Path], prefix_cache: bool = True,
                       capacity_policy: Optional[str] = None) -> ConformEngine:
        from .conform import trtllm_engine
        return trtllm_engine(self.check_folder(path), capacity_policy or GUARANTEED_NO_EVICT)


ENGINE = TrtllmDescriptor()
