"""Load TensorRT-LLM's ``tensorrt_llm/_torch/pyexecutor/scheduler/scheduler.py`` on the CPU.

Where: ``--engine-path DIR``, else ``$TOKENBUDGET_TRTLLM_PATH``, else ``.engines/tensorrt-llm-002f3cc3``
in the repository root: a folder holding ``tensorrt_llm/`` (the archive of ``../shared/engines/``
unpacked, a checkout's root, or the site-packages of a TensorRT-LLM install). ``load(path)`` runs
that one file as ``tensorrt_llm._torch.pyexecutor.scheduler.scheduler`` and nothing else of the
package: the parent packages are empty namespaces over the folder (no ``__init__`` of an install
runs, so no CUDA library is needed) and what the file imports from TensorRT-LLM is the stand-ins
of ``standins/`` (the C++ bindings, the request, the policy enum, the logger). It raises
``TrtllmUnavailable`` (one line naming the fix) when the folder holds no scheduler.py or the file
does not import. Each folder is loaded once per process; several folders (a copy with a planted
slip beside the real one) live side by side, each its own module object.
"""
from __future__ import annotations

import importlib.util
import re
import sys
import types
from pathlib import Path
from typing import Any

from ..engine_folder import chosen_folder
from ..unavailable import EngineUnavailable
from .location import COMMIT, DEFAULT_PATH, PATH_ENV
from .standins import bindings, llm_args, llm_request, logger, strenum

SCHEDULER = Path("tensorrt_llm", "_torch", "pyexecutor", "scheduler", "scheduler.py")
MODULE = "tensorrt_llm._torch.pyexecutor.scheduler.scheduler"
FIX = (f"unpack ../shared/engines/tensorrt-llm-{COMMIT}.tar.gz into .engines/ (tar xzf ... -C .engines), or point "
       f"--engine-path DIR or ${PATH_ENV} at a folder holding tensorrt_llm/ (a TensorRT-LLM install's site-packages "
       "or a checkout's root)")
# TensorRT-LLM's module names -> the stand-in published under each
STANDINS: dict[str, types.ModuleType] = {
    "tensorrt_llm.bindings": bindings,
    "tensorrt_llm.llmapi.llm_args": llm_args,
    "tensorrt_llm.logger": logger,
    "tensorrt_llm._torch.pyexecutor.llm_request": llm_request,
}
PACKAGES = ("tensorrt_llm", "tensorrt_llm.llmapi", "tensorrt_llm._torch", "tensorrt_llm._torch.pyexecutor",
            "tensorrt_llm._torch.pyexecutor.scheduler")

_loaded: dict[Path, dict[str, Any]] = {}


class TrtllmUnavailable(EngineUnavailable):
    """TensorRT-LLM's scheduler.py cannot be loaded here; the message says why and the fix, in one line."""


def engine_folder(path: Path | None = None) -> Path:
    """The folder scheduler.py is loaded from: ``path``, the env var, or the default."""
    return chosen_folder(path, PATH_ENV, DEFAULT_PATH)


def check_folder(path: Path | None = None) -> Path:
    """``engine_folder(path)`` once it holds scheduler.py; TrtllmUnavailable (one line) otherwise."""
    folder = engine_folder(path)
    if not (folder / SCHEDULER).is_file():
        raise TrtllmUnavailable(f"no TensorRT-LLM scheduler at {folder / SCHEDULER}; {FIX}")
    return folder


def release(folder: Path) -> str:
    """What the folder holds: an install's ``tensorrt_llm/version.py`` version, else the commit of
    an unpacked archive's name (``tensorrt-llm-<commit>``), else "?"."""
    version = folder / "tensorrt_llm" / "version.py"
    if version.is_file():
        match = re.search(r"__version__\s*=\s*['\"]([^'\"]+)", version.read_text(errors="replace"))
        if match:
            return match.group(1)
    match = re.fullmatch(r"tensorrt-llm-([0-9a-f]{7,40})", folder.name)
    return match.group(1)[:9] if match else "?"


def _publish(folder: Path) -> None:
    """The empty parent packages over ``folder`` and the stand-ins, under TensorRT-LLM's names."""
    if "strenum" not in sys.modules:
        try:
            import strenum as _  # type: ignore[import-not-found]  # noqa: F401
        except ImportError:
            sys.modules["strenum"] = strenum
    for name in PACKAGES:
        package = types.ModuleType(name)
        package.__path__ = [str(folder.joinpath(*name.split(".")))]
        sys.modules[name] = package
    for name, module in STANDINS.items():
        sys.modules[name] = module
        parent, _, leaf = name.rpartition(".")
        setattr(sys.modules[parent], leaf, module)


def load(path: Path | None = None) -> dict[str, Any]:
    """scheduler.py of ``check_folder(path)`` as a module, with the stand-ins it was run with."""
    folder = check_folder(path)
    if folder in _loaded:
        return _loaded[folder]
    _publish(folder)
    spec = importlib.util.spec_from_file_location(MODULE, folder / SCHEDULER)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[MODULE] = module  # dataclasses reads the module while the file runs
    try:
        spec.loader.exec_module(module)
    except Exception as exc:  # noqa: BLE001 - any failure means this scheduler.py cannot run here
        sys.modules.pop(MODULE, None)
        raise TrtllmUnavailable(f"cannot load {folder / SCHEDULER}: {type(exc).__name__}: "
                                f"{' '.join(str(exc).split())[:300]}; {FIX}") from None
    _loaded[folder] = {"folder": folder, "release": release(folder), "scheduler": module,
                       "LlmRequest": llm_request.LlmRequest, "LlmRequestState": llm_request.LlmRequestState,
                       "CapacitySchedulerPolicy": llm_args.CapacitySchedulerPolicy}
    return _loaded[folder]
