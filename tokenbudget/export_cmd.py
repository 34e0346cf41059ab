"""``tokenbudget export``: a counterexample trace as a real engine's unit test.

``--<engine>-test TRACE``, one flag per engine of ``harness.registry`` that supports export,
writes one self-contained pytest file (the descriptor's ``export_test``; vLLM's is
``tokenbudget/harness/vllm/export.py``) that builds the engine's scheduler for the trace's
config, replays its requests and steps, and asserts the broken invariant on each step.
Without ``-o`` the file goes to stdout. An existing ``-o`` file is never overwritten. Exit
status 0 when written; 2 for a bad trace, one that violates nothing or has no engine assert,
or an unwritable ``-o``.
"""
from __future__ import annotations

import argparse
import os
from pathlib import Path

from .args import UsageError
from .console import Console
from .exits import OK
from .harness import registry
from .harness.engine_descriptor import EXPORT
from .spec.trace import load_trace

HELP = "write a counterexample trace as a real engine's unit test"
DESCRIPTION = ("Write a trace as one self-contained pytest file for a real engine's test suite: it fails on an "
               "engine that has the bug and passes where it is fixed or the deployment is refused.")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    which = parser.add_mutually_exclusive_group(required=True)
    for name in registry.names(EXPORT):
        label = registry.engine(name).label
        which.add_argument(f"--{name}-test", metavar="TRACE", dest=f"{name}_test",
                           help=f"the trace to export as a {label} unit test (format tokenbudget.trace/1, under "
                                f"the policy of {label}'s own accounting)")
    parser.add_argument("-o", "--output", metavar="FILE",
                        help="write the test to FILE, which must not exist (default: stdout)")


def run(args: argparse.Namespace, console: Console) -> int:
    if args.output is not None:
        _check_output(args.output)
    name = next(n for n in registry.names(EXPORT) if getattr(args, f"{n}_test") is not None)
    text = registry.engine(name).export_test(load_trace(getattr(args, f"{name}_test")))
    if args.output is None:
        console.text(text.rstrip("\n"))
        return OK
    try:
        with open(args.output, "x", encoding="utf-8") as out:
            out.write(text)
    except FileExistsError:
        raise UsageError(f"{args.output} exists; export never overwrites a file: give -o a new name") from None
    console.progress(f"wrote {args.output}")
    return OK


def _check_output(path: str) -> None:
    """Refuse, before any work, an ``-o`` that exists or whose folder does not."""
    if os.path.lexists(path):
        raise UsageError(f"{path} exists; export never overwrites a file: give -o a new name")
    folder = Path(path).resolve().parent
    if not folder.is_dir():
        raise UsageError(f"cannot write {path}: no folder {folder}; give -o a path in an existing folder")
