"""``--engine-path DIR`` and the child process a real engine runs in.

A command that names a real engine (``--target NAME`` or ``--engine NAME``, one of
``harness.registry``) runs again in a child process when the engine's descriptor asks for one
(``child_env``: an engine run from a folder, or one whose import stubs must stay out of this
process); the
child knows it is the child by the environment the descriptor gives it, and when the parent
started by ``TOKENBUDGET_STARTED`` (a budget in seconds counts from there). The parent
returns the child's exit status.
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from .args import UsageError, folder
from .console import Console
from .harness import registry

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
    """``--engine-path DIR``: each registered engine's folder, as its descriptor says."""
    parser.add_argument("--engine-path", type=folder, metavar="DIR",
                        help="the real engine's folder: " + "; ".join(
                            f"for {name}, {registry.engine(name).folder_help}" for name in registry.names()))


def engine_named(args: argparse.Namespace) -> str | None:
    """The real engine the command line names (``--engine`` or ``--target``), or None."""
    name = getattr(args, "engine", None) or getattr(args, "target", None)
    return name if name in registry.ENGINES else None


def run_in_child(args: argparse.Namespace, argv: list[str]) -> int | None:
    """Run ``tokenbudget argv`` again in the child process the engine it names asks for
    (``EngineDescriptor.child_env``); its exit status, or None when this process runs it.
    UsageError for ``--engine-path`` without a real engine."""
    path = getattr(args, "engine_path", None)
    name = engine_named(args)
    if name is None:
        if path is None:
            return None
        *others, last = registry.names()
        raise UsageError(f"--engine-path runs a real engine: use it with --target {', '.join(others)} or {last} "
                         "(or conform --engine)")
    env = registry.engine(name).child_env(path)
    if env is None:
        return None
    env.setdefault(STARTED_ENV, repr(own_process_started()))
    return run_child(argv, env)


def run_child(argv: list[str], env: dict[str, str]) -> int:
    """``tokenbudget argv`` in a child process with ``env``; its exit status. Its stderr
    (progress, an error line) is passed on as it comes and its stdout when it ends, through
    this process's ``sys.stderr`` and ``sys.stdout`` (the command has not redirected them yet)."""
    with tempfile.TemporaryFile("w+") as out:
        child = subprocess.Popen([sys.executable, "-c", _CHILD, *argv], env=env, stdout=out,
                                 stderr=subprocess.PIPE, text=True)
        assert child.stderr is not None
        for line in child.stderr:
            sys.stderr.write(line)
            sys.stderr.flush()
        code = child.wait()
        out.seek(0)
        sys.stdout.write(out.read())
    return code


def announce(console: Console, name: str, path: Path | None) -> None:
    """On stderr, before any work: the real engine's release and folder, the model it is
    compared with, and (one line) that the release is not modelled. Raises as ``modelled``."""
    modelled = registry.engine(name).modelled(path)
    console.note(modelled.banner(registry.engine(name).label))
    if modelled.warning:
        console.warn(modelled.warning)
