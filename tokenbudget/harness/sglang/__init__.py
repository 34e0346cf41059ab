"""SGLang's real scheduler code (0.5.23) as a target: its runtime, engine driver and
conformance; ``ENGINE`` describes it to the commands (``harness.registry``). SGLang is
loaded only in a process of its own (``runtime``: the torchvision stub)."""
from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Optional

from ..engine_descriptor import CONFORM, FUZZ, REPLAY, EngineDescriptor, Modelled
from .location import DEFAULT_PATH, PATH_ENV, RELEASE

if TYPE_CHECKING:
    from ...model.target import TargetFactory
    from ..conform import ConformEngine


class SglangDescriptor(EngineDescriptor):
    name, label = "sglang", "SGLang"
    supports = frozenset({FUZZ, REPLAY, CONFORM})
    path_env, default_folder = PATH_ENV, DEFAULT_PATH
    folder_help = "a pip --target folder holding SGLang's sglang/ package (default $TOKENBUDGET_SGLANG_PATH, " \
                  "else .engines/sglang-0.5.23)"
    target_help = "SGLang 0.5.23's scheduler code, in a child process"
    prefix_cache_switch = True

    def check_folder(self, path: Optional[Path]) -> Optional[Path]:
        from .runtime import check_folder
        return check_folder(path)

    def child_env(self, path: Optional[Path]) -> Optional[dict[str, str]]:
        from .runtime import CHILD_ENV, PATH_ENV, check_folder
        folder = check_folder(path)
        if os.environ.get(CHILD_ENV) == str(folder):
            return None
        return {**os.environ, CHILD_ENV: str(folder), PATH_ENV: str(folder)}

    def modelled(self, path: Optional[Path]) -> Modelled:
        from ...model import get_policy
        from .runtime import check_folder
        from .workloads import POLICY
        check_folder(path)
        return Modelled(RELEASE, POLICY, get_policy(POLICY).version)

    def fuzz_target(self) -> TargetFactory:
        from .differential import SglangDifferentialTarget
        return SglangDifferentialTarget

    def replay_target(self) -> TargetFactory:
        from .target import SglangTarget
        return SglangTarget

    def conform_engine(self, path: Optional[Path], prefix_cache: bool = True,
                       capacity_policy: Optional[str] = None) -> ConformEngine:
        from .conform import sglang_engine
        return sglang_engine(path, radix=prefix_cache)


ENGINE = SglangDescriptor()
