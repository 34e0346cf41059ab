"""vLLM's real scheduler (the installed vllm package, or the one in ``--engine-path DIR``) as a
target; ``ENGINE`` describes it to the commands (``harness.registry``)."""
from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Optional

from ..engine_descriptor import CAMPAIGN, CONFORM, EXPORT, FUZZ, MONITOR, REPLAY, EngineDescriptor, Modelled

if TYPE_CHECKING:
    from ...model import BudgetPolicy
    from ...model.target import TargetFactory
    from ...spec.trace import Trace
    from ..conform import ConformEngine


class VllmDescriptor(EngineDescriptor):
    name, label = "vllm", "vLLM"
    supports = frozenset({FUZZ, REPLAY, CONFORM, CAMPAIGN, EXPORT, MONITOR})
    folder_help = "an unpacked vLLM wheel or a vLLM checkout's root, run in a child process (default: the installed vllm)"
    target_help = "vLLM's real scheduler (the installed one, or --engine-path's)"
    findings_name_mechanism = True

    def check_folder(self, path: Optional[Path]) -> Optional[Path]:
        from .folder import engine_folder
        return None if path is None else engine_folder(path)

    def child_env(self, path: Optional[Path]) -> Optional[dict[str, str]]:
        from .folder import child_env, in_child
        return None if path is None or in_child(path) else child_env(path)

    def modelled(self, path: Optional[Path]) -> Modelled:
        engine = self.conform_engine(path)  # the importable release, and the nearest modelled version
        return Modelled(engine.release, engine.policy, engine.model_version, engine.warning)

    def fuzz_target(self) -> TargetFactory:
        from .differential import DifferentialTarget
        return DifferentialTarget

    def replay_target(self) -> TargetFactory:
        from .target import VllmTarget
        return VllmTarget

    def conform_engine(self, path: Optional[Path], prefix_cache: bool = True,
                       capacity_policy: Optional[str] = None) -> ConformEngine:
        from .conform import vllm_engine
        return vllm_engine()

    def check_policy(self, policy: BudgetPolicy) -> None:
        from ...model import BudgetConfig
        from .differential import DifferentialTarget
        DifferentialTarget(BudgetConfig(), policy)

    def export_test(self, trace: Trace) -> str:
        from .export import export_vllm_test
        return export_vllm_test(trace)


ENGINE = VllmDescriptor()
