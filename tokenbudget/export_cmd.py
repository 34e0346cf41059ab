"""``tokenbudget export``: a counterexample trace as a vLLM unit test.

``--vllm-test TRACE`` writes one self-contained pytest file (``tokenbudget/harness/vllm/export.py``)
that builds vLLM's scheduler for the trace's config, replays its requests and steps, and
asserts the broken invariant on each ``SchedulerOutput``. Without ``-o`` the file goes to
stdout. An existing ``-o`` file is never overwritten. Exit status 0 when written; 2 for
a bad trace, one that violates nothing or has no vLLM assert, or an unwritable ``-o``.
"""
from __future__ import annotations

import argparse
import os
from pathlib import Path

from .args import UsageError
from .console import Console
from .exits import OK
from .harness.vllm.export import export_vllm_test
from .spec.trace import load_trace

HELP = "write a counterexample trace as a vLLM unit test"
DESCRIPTION = ("Write a vllm-adaptive trace as one self-contained pytest file for vLLM's test suite: it fails on a "
               "vLLM that has the bug and passes where it is fixed or the deployment is refused.")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--vllm-test", required=True, metavar="TRACE",
                        help="the trace to export (format tokenbudget.trace/1, policy vllm-adaptive)")
    parser.add_argument("-o", "--output", metavar="FILE",
                        help="write the test to FILE, which must not exist (default: stdout)")


def run(args: argparse.Namespace, console: Console) -> int:
    if args.output is not None:
        _check_output(args.output)
    text = export_vllm_test(load_trace(args.vllm_test))
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
