"""Import FastDeploy's scheduler (``fastdeploy.engine.sched.resource_manager_v1``) on the CPU."""
from __future__ import annotations

import importlib.abc
import logging
import importlib.machinery
import os
import re
import subprocess
import sys
import tempfile
import types
import warnings
from pathlib import Path
from typing import Any

from ..engine_folder import chosen_folder
from ..unavailable import EngineUnavailable
from .location import PATH_ENV

CHILD_ENV = "TOKENBUDGET_FASTDEPLOY_CHILD"  # set in the child process that loads FastDeploy: its folder
INSTALL = ('pip install "tokenbudget[fastdeploy]" (Paddle\'s CPU wheel paddlepaddle==3.3.1 and what the scheduler '
           'imports)')
STUBBED = ("aistudio_sdk", "paddleformers", "huggingface_hub")
ENVIRONMENT = {"ENABLE_V1_KVCACHE_SCHEDULER": "1", "ENABLE_V1_KVCACHE_MANAGER": "0"}

_loaded: dict[str, Any] = {}


class FastDeployUnavailable(EngineUnavailable):
    """FastDeploy or Paddle cannot be imported here; the message says why and the fix, in one line."""


def engine_folder(path: Path | None = None) -> Path | None:
    """The folder FastDeploy is imported from: ``path``, else the env var; None when neither is set."""
    return chosen_folder(path, PATH_ENV, None)


def check_folder(path: Path | None = None) -> Path:
    """``engine_folder(path)`` once it holds a ``fastdeploy`` package with the V1 scheduler;
    FastDeployUnavailable (one line) otherwise. Imports nothing."""
    folder = engine_folder(path)
    if folder is None:
        raise FastDeployUnavailable(f"no FastDeploy given: pass --engine-path DIR or set ${PATH_ENV} to a folder "
                                    "holding FastDeploy's fastdeploy/ package (a checkout's root)")
    if not (folder / "fastdeploy" / "engine" / "sched" / "resource_manager_v1.py").is_file():
        raise FastDeployUnavailable(f"{folder} holds no FastDeploy scheduler "
                                    "(fastdeploy/engine/sched/resource_manager_v1.py); point --engine-path or "
                                    f"${PATH_ENV} at the root of a FastDeploy checkout")
    return folder


def child_env(folder: Path) -> dict[str, str]:
    """The environment of the child process that loads the FastDeploy in ``folder``."""
    return {**os.environ, CHILD_ENV: str(folder), PATH_ENV: str(folder)}


def commit(folder: Path) -> str:
    """The FastDeploy commit in ``folder``: its git HEAD (abbreviated to 9), else the
    ``fastdeploy-<commit>`` of an unpacked archive's name, else "?"."""
    try:
        head = subprocess.run(["git", "-C", str(folder), "rev-parse", "--show-toplevel", "--short=9", "HEAD"],
                              capture_output=True, text=True, timeout=10, check=False)
        lines = head.stdout.split()
        if head.returncode == 0 and len(lines) == 2 and Path(lines[0]).resolve() == folder:  # its own checkout
            return lines[1]
    except (OSError, subprocess.SubprocessError):
        pass
    match = re.fullmatch(r"fastdeploy-([0-9a-f]{7,40})", folder.name)
    return match.group(1)[:9] if match else "?"


class _Anything(type):
    """A stub class: any attribute is another stub class; calling it builds an inert object."""

    def __getattr__(cls, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        return _Anything(name, (_Inert,), {})


class _Inert(metaclass=_Anything):
    def __init__(self, *args: object, **kwargs: object) -> None:
        pass

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        return _Anything(name, (_Inert,), {})


class _StubModule(types.ModuleType):
    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        return _Anything(name, (_Inert,), {})


class _StubFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Answers any module under ``STUBBED`` with a ``_StubModule`` package."""

    def find_spec(self, fullname: str, path: object, target: object = None) -> importlib.machinery.ModuleSpec | None:
        if fullname.split(".")[0] not in STUBBED:
            return None
        return importlib.machinery.ModuleSpec(fullname, self, is_package=True)

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType:
        return _StubModule(spec.name)

    def exec_module(self, module: types.ModuleType) -> None:
        module.__path__ = []


def load(path: Path | None = None) -> dict[str, Any]:
    """FastDeploy's scheduler and config classes, imported from ``check_folder(path)`` once per process."""
    folder = check_folder(path)
    if _loaded:
        if _loaded["folder"] != folder:
            raise FastDeployUnavailable(f"FastDeploy is already loaded from {_loaded['folder']} in this process, "
                                        f"not {folder}")
        return _loaded
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # Paddle warns that ccache is missing, which nothing here compiles with
            import paddle
        paddle.disable_signal_handler()  # its SIGTERM handler prints a C++ report when a fuzz worker is stopped
    except Exception as exc:  # noqa: BLE001 - any failure means Paddle cannot run here
        raise FastDeployUnavailable(f"cannot import Paddle ({type(exc).__name__}: {' '.join(str(exc).split())[:200]}); "
                                    f"install it with: {INSTALL}") from None
    os.environ.update(ENVIRONMENT)
    os.environ.setdefault("FD_LOG_DIR", tempfile.mkdtemp(prefix="tokenbudget-fastdeploy-log-"))
    sys.path.insert(0, str(folder))
    if not any(isinstance(f, _StubFinder) for f in sys.meta_path):
        sys.meta_path.insert(0, _StubFinder())
    logging.disable(logging.WARNING)  # FastDeploy's import logs at INFO (a missing version.txt)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            from fastdeploy import envs
            from fastdeploy.config import CacheConfig, FDConfig, ParallelConfig, SchedulerConfig
            from fastdeploy.engine.args_utils import EngineArgs
            from fastdeploy.engine.request import Request, RequestStatus, RequestType
            from fastdeploy.engine.sched import resource_manager_v1
    except Exception as exc:  # noqa: BLE001 - any import failure means FastDeploy cannot run here
        why = " ".join(str(exc).split())[:300]
        raise FastDeployUnavailable(f"cannot import FastDeploy's scheduler from {folder}: {type(exc).__name__}: "
                                    f"{why}; install what it needs with: {INSTALL}") from None
    finally:
        logging.disable(logging.NOTSET)
    for name in list(logging.root.manager.loggerDict):  # FastDeploy logs every allocation; keep its console quiet
        if name.startswith("fastdeploy"):
            logging.getLogger(name).setLevel(logging.CRITICAL)
    _loaded.update(folder=folder, commit=commit(folder), envs=envs, CacheConfig=CacheConfig, FDConfig=FDConfig,
                   ParallelConfig=ParallelConfig, SchedulerConfig=SchedulerConfig, EngineArgs=EngineArgs,
                   Request=Request, RequestStatus=RequestStatus, RequestType=RequestType,
                   resource_manager_v1=resource_manager_v1)
    return _loaded
