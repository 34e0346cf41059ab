"""``tokenbudget check``: the policy x invariant matrix of ``check.run_check``.

Exit status 0 when every policy's row is ok, 1 when some row failed, 2 when a section
stopped on the user's input (a policy the prover cannot run): the matrix of the sections
finished is printed first, then the one line.
"""
from __future__ import annotations

import argparse
from pathlib import Path

from . import render
from .args import add_database, add_json, add_policy, add_verdict_options, folder
from .check import CheckReport, run_check, stopped_by_input, write_found
from .console import Console
from .exits import FAILED, INTERRUPTED, OK
from .fuzz.database import open_database
from .model.replay import BadInput
from .spec.user_paths import writable_folder

HELP = "replay the built-in corpus; a policy x invariant matrix"
DESCRIPTION = ("Replay the built-in corpus and print a policy x invariant matrix. A built-in policy is "
               "judged by its own corpus traces and their expectations. A user policy (pkg.module:Class) "
               "replays the ops of every corpus trace without expectations, is fuzzed and proved. Every "
               "violation gets one verdict, as fuzz and prove give it: known (listed; --strict fails it), the "
               "policy's own, or more undone work than its base (--max-work-gap); the last two fail.")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_policy(parser, "check this policy (repeatable; default: every built-in)")
    add_database(parser)
    parser.add_argument("--corpus", type=folder, metavar="DIR",
                        help="write every trace a violation was found on (corpus replays, fuzzing, the prover) "
                             "into DIR, to replay or export; existing files are kept")
    add_verdict_options(parser)
    add_json(parser)


def run(args: argparse.Namespace, console: Console) -> int:
    if args.corpus is not None:  # before any work
        writable_folder(args.corpus, "--corpus")
    report = run_check(args.policies, console.progress, open_database(args.database), args.max_work_gap,
                       args.strict)
    written = write_found(report, args.corpus) if args.corpus is not None else []
    if args.json:
        console.json({**report.to_json(), "corpus": [str(p) for p in written]})
    else:
        console.text(render.check(report) + _traces_line(report, args.corpus, written))
    if report.error is not None:
        if stopped_by_input(report):
            raise BadInput(report.stopped or "")
        raise report.error  # a fault of tokenbudget's own, after what was finished
    return INTERRUPTED if report.interrupted else OK if report.ok else FAILED


def _traces_line(report: CheckReport, corpus: Path | None, written: list[Path]) -> str:
    """Where the traces found went, or how to get them."""
    if written:
        return f"\ntraces: {len(written)} written to {corpus} (tokenbudget replay TRACE shows one)"
    if report.found:
        return f"\ntraces: {len(report.found)} found; check --corpus DIR writes them"
    return ""
