"""FastDeploy's real scheduler (``ResourceManagerV1``, from a checkout, with Paddle's CPU
wheel) as a target; ``ENGINE`` describes it to the commands (``harness.registry``).
FastDeploy is loaded only in a process of its own (``runtime``: the stubs)."""
from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Optional

from ..engine_descriptor import CONFORM, FUZZ, REPLAY, EngineDescriptor, Modelled
from .location import PATH_ENV

if TYPE_CHECKING:
    from ...model.target import TargetFactory
    from ..conform import ConformEngine


class FastDeployDescriptor(EngineDescriptor):
    name, label = "fastdeploy", "FastDeploy"
    supports = frozenset({FUZZ, REPLAY, CONFORM})
    path_env = PATH_ENV
    folder_help = "a FastDeploy checkout's root, a folder holding fastdeploy/ (default $TOKENBUDGET_FASTDEPLOY_PATH)"
    target_help = "FastDeploy's ResourceManagerV1 at the folder's commit, in a child process"

    def check_folder(self, path: Optional[Path]) -> Optional[Path]:
        from .runtime import check_folder
        return check_folder(path)

    def child_env(self, path: Optional[Path]) -> Optional[dict[str, str]]:
        from .runtime import CHILD_ENV, check_folder, child_env
        folder = check_folder(path)
        return None if os.environ.get(CHILD_ENV) == str(folder) else child_env(folder)

    def modelled(self, path: Optional[Path]) -> Modelled:
        engine = self.conform_engine(path)  # the folder's commit, and the modelled commit it matches
        return Modelled(engine.release, engine.policy, engine.model_version, engine.warning)

    def fuzz_target(self) -> TargetFactory:
        from .differential import FastDeployDifferentialTarget
        return FastDeployDifferentialTarget

    def replay_target(self) -> TargetFactory:
        from .target import FastDeployTarget
        return FastDeployTarget

    def conform_engine(self, path: Optional[Path], prefix_cache: bool = True,
                       capacity_policy: Optional[str] = None) -> ConformEngine:
        from .conform import fastdeploy_engine
        return fastdeploy_engine(path)


ENGINE = FastDeployDescriptor()
