"""``--engine-path DIR`` for vLLM: the vLLM in DIR (an unpacked wheel or a source checkout)
instead of the installed one, run in a child process whose import path starts with DIR,
with ``VLLM_TARGET_DEVICE=cpu``. The child knows it is the child by ``ENGINE_PATH_ENV``, and
``engine._import_vllm`` checks that the vLLM it imports is DIR's."""
from __future__ import annotations

import os
from pathlib import Path

from ..unavailable import EngineUnavailable
from .engine import ENGINE_PATH_ENV


def engine_folder(path: Path) -> Path:
    """DIR resolved, once it holds a ``vllm`` package; EngineUnavailable naming the fix otherwise."""
    folder = path.expanduser().resolve()
    if not (folder / "vllm" / "__init__.py").is_file():
        raise EngineUnavailable(f"--engine-path {path} holds no vllm package ({path}/vllm/__init__.py); point it "
                                "at an unpacked vLLM wheel or the root of a vLLM checkout")
    return folder


def in_child(path: Path) -> bool:
    """Whether this process is the child started for ``--engine-path path``."""
    return os.environ.get(ENGINE_PATH_ENV) == str(engine_folder(path))


def child_env(path: Path) -> dict[str, str]:
    """The environment of the child that runs the vLLM in ``path``: this one, with the
    folder first on the import path, ``VLLM_TARGET_DEVICE=cpu`` and the child's mark."""
    folder = engine_folder(path)
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(folder), *filter(None, [env.get("PYTHONPATH")])])
    env["VLLM_TARGET_DEVICE"] = "cpu"
    env[ENGINE_PATH_ENV] = str(folder)
    return env
