"""``--engine-path DIR``: run a command against the vLLM in DIR (an unpacked wheel or a source
checkout) instead of the installed one.

The command runs again in a child process whose import path starts with DIR, with
``VLLM_TARGET_DEVICE=cpu``; the child knows it is the child by ``TOKENBUDGET_ENGINE_PATH``
and checks that the vLLM it imports is DIR's, and when the parent started by
``TOKENBUDGET_STARTED`` (a budget in seconds counts from there). The parent returns the
child's exit status.
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import TextIO

from .args import UsageError, folder
from .harness.vllm.engine import ENGINE_PATH_ENV

_CHILD = "import sys; from tokenbudget.cli import main; sys.exit(main())"
STARTED_ENV = "TOKENBUDGET_STARTED"  # time.time() when the parent command started, for the child's --seconds


def own_process_started() -> float:
    """``time.time()`` when this process started (read from /proc on Linux; elsewhere, now)."""
    try:
        ticks = int(Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split()[19])  # since boot
        uptime = float(Path("/proc/uptime").read_text().split()[0])
        return time.time() - max(0.0, uptime - ticks / os.sysconf("SC_CLK_TCK"))
    except (OSError, ValueError, IndexError):
        return time.time()


def add_engine_path(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--engine-path", type=folder, metavar="DIR",
                        help="run the vLLM in DIR (an unpacked wheel or a vLLM checkout) instead of the installed one; "
                             "with --target sglang, the folder holding SGLang's sglang/ package (default "
                             "$TOKENBUDGET_SGLANG_PATH); with --target fastdeploy, the FastDeploy checkout in DIR "
                             "(default $TOKENBUDGET_FASTDEPLOY_PATH)")


def engine_folder(path: Path) -> Path:
    """DIR resolved, once it holds a ``vllm`` package; UsageError naming the fix otherwise."""
    folder = path.expanduser().resolve()
    if not (folder / "vllm" / "__init__.py").is_file():
        raise UsageError(f"--engine-path {path} holds no vllm package ({path}/vllm/__init__.py); point it at an "
                         "unpacked vLLM wheel or the root of a vLLM checkout")
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
    env.setdefault(STARTED_ENV, repr(own_process_started()))
    return env


def run_in_child(path: Path, argv: list[str]) -> int:
    """Run ``tokenbudget argv`` again in the child for the vLLM in ``path`` (``child_env``);
    its exit status (``run_child``)."""
    return run_child(argv, child_env(path))


def run_child(argv: list[str], env: dict[str, str], stdout: TextIO | None = None) -> int:
    """``tokenbudget argv`` in a child process with ``env``; its exit status. Its stderr
    (progress, an error line) is passed on as it comes and its stdout when it ends, through
    this process's ``sys.stderr`` and ``stdout`` (default ``sys.stdout``; a ``--json`` command
    passes its console's real stdout)."""
    with tempfile.TemporaryFile("w+") as out:
        child = subprocess.Popen([sys.executable, "-c", _CHILD, *argv], env=env, stdout=out,
                                 stderr=subprocess.PIPE, text=True)
        assert child.stderr is not None
        for line in child.stderr:
            sys.stderr.write(line)
            sys.stderr.flush()
        code = child.wait()
        out.seek(0)
        (stdout or sys.stdout).write(out.read())
    return code
