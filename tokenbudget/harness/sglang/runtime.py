"""Import SGLang 0.5.23 on the CPU, from a ``pip install --no-deps --target`` folder."""
from __future__ import annotations

import importlib
import os
import sys
import types
from pathlib import Path
from typing import Any

from ..engine_folder import chosen_folder
from ..unavailable import EngineUnavailable
from .location import DEFAULT_PATH, PATH_ENV, RELEASE

CHILD_ENV = "TOKENBUDGET_SGLANG_CHILD"  # set in the child process that loads SGLang: its folder
INSTALL = (f"pip install --no-deps --target .engines/sglang-{RELEASE} sglang=={RELEASE} "
           "&& pip install orjson IPython gguf")
STUBBED = ("torchvision", "torchvision.io", "torchvision.transforms", "torchvision.transforms.functional",
           "torchvision.transforms.v2", "torchvision.transforms.v2.functional")

_loaded: dict[str, Any] = {}


class SglangUnavailable(EngineUnavailable):
    """SGLang cannot be imported here; the message says why and how to install it, in one line."""


def engine_folder(path: Path | None = None) -> Path:
    """The folder SGLang is imported from: ``path``, the env var, or the default."""
    return chosen_folder(path, PATH_ENV, DEFAULT_PATH)


def check_folder(path: Path | None = None) -> Path:
    """``engine_folder(path)`` once it holds an ``sglang`` package; SglangUnavailable (one
    line naming the install command) otherwise. Imports nothing."""
    folder = engine_folder(path)
    if not (folder / "sglang" / "__init__.py").is_file():
        raise SglangUnavailable(f"SGLang {RELEASE} is not installed at {folder} (set --engine-path DIR or "
                                f"${PATH_ENV}); install it with: {INSTALL}")
    return folder


class _Stub(types.ModuleType):
    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        return _Stub(f"{self.__name__}.{name}")


def _stub_torchvision() -> None:
    try:
        importlib.import_module("torchvision")
        return
    except ImportError:
        pass
    importlib.import_module("transformers.utils.import_utils")  # decides torchvision is absent, before the stub
    for name in STUBBED:
        module = _Stub(name)
        module.__path__ = []  # a package, so its submodules import
        sys.modules[name] = module


def load(path: Path | None = None) -> dict[str, Any]:
    """SGLang's scheduler classes, imported from ``engine_folder(path)`` once per process."""
    folder = check_folder(path)
    if _loaded:
        if _loaded["folder"] != folder:
            raise SglangUnavailable(f"SGLang is already loaded from {_loaded['folder']} in this process, not {folder}")
        return _loaded
    sys.path.insert(0, str(folder))
    os.environ.setdefault("SGLANG_LOG_LEVEL", "error")
    try:
        _stub_torchvision()
        import warnings
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            import sglang
            import torch
            from sglang.srt import runtime_context
            from sglang.srt.managers import schedule_batch, schedule_policy
            from sglang.srt.managers.scheduler_components.new_token_ratio_tracker import NewTokenRatioTracker
            from sglang.srt.mem_cache import allocation_sizing, common
            from sglang.srt.mem_cache.allocator.paged import PagedTokenToKVPoolAllocator
            from sglang.srt.mem_cache.allocator.token import TokenToKVPoolAllocator
            from sglang.srt.mem_cache.cache_init_params import CacheInitParams
            from sglang.srt.mem_cache.memory_pool import ReqToTokenPool
            from sglang.srt.mem_cache.unified_cache.components import ComponentType
            from sglang.srt.mem_cache.unified_radix_cache import UnifiedRadixCache
            from sglang.srt.sampling.sampling_params import SamplingParams
            from sglang.srt.server_args import ServerArgs
            from sglang.srt.speculative.spec_info import SpeculativeAlgorithm
    except Exception as exc:  # noqa: BLE001 - any import failure means SGLang cannot run here
        raise SglangUnavailable(f"cannot import SGLang from {folder}: {type(exc).__name__}: "
                                f"{' '.join(str(exc).split())[:300]}; install it with: {INSTALL}") from None
    version = getattr(sglang, "__version__", "?")
    _loaded.update(folder=folder, version=version, torch=torch, NewTokenRatioTracker=NewTokenRatioTracker,
                   runtime_context=runtime_context, schedule_batch=schedule_batch,
                   schedule_policy=schedule_policy, allocation_sizing=allocation_sizing, common=common,
                   PagedTokenToKVPoolAllocator=PagedTokenToKVPoolAllocator,
                   TokenToKVPoolAllocator=TokenToKVPoolAllocator, CacheInitParams=CacheInitParams,
                   ReqToTokenPool=ReqToTokenPool, ComponentType=ComponentType, UnifiedRadixCache=UnifiedRadixCache,
                   SamplingParams=SamplingParams, ServerArgs=ServerArgs, SpeculativeAlgorithm=SpeculativeAlgorithm)
    return _loaded
