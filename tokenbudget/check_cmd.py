"""``tokenbudget check``: the policy x invariant matrix of ``check.run_check``.

Exit status 0 when every policy's row is ok, 1 when some row failed, 2 when a section
stopped on the user's input (a policy the prover cannot run): the matrix of the sections
finished is printed first, then the one line.
"""
from __future__ import annotations

import argparse

from . import render
from .args import add_database, add_json, add_policy, add_verdict_options
from .check import run_check, stopped_by_input
from .console import Console
from .exits import FAILED, INTERRUPTED, OK
from .fuzz.database import open_database
from .model.replay import BadInput

HELP = "replay the built-in corpus; a policy x invariant matrix"
DESCRIPTION = ("Replay the built-in corpus and print a policy x invariant matrix. A built-in policy is "
               "judged by its own corpus traces and their expectations. A user policy (pkg.module:Class) "
               "replays the ops of every corpus trace without expectations, is fuzzed and proved. Every "
               "violation gets one verdict, as fuzz and prove give it: known (listed; --strict fails it), the "
               "policy's own, or more undone work than its base (--max-work-gap); the last two fail.")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_policy(parser, "check this policy (repeatable; default: every built-in)")
    add_database(parser)
    add_verdict_options(parser)
    add_json(parser)


def run(args: argparse.Namespace, console: Console) -> int:
    report = run_check(args.policies, console.progress, open_database(args.database), args.max_work_gap,
                       args.strict)
    if args.json:
        console.json(report.to_json())
    else:
        console.text(render.check(report))
    if report.error is not None:
        if stopped_by_input(report):
            raise BadInput(report.stopped or "")
        raise report.error  # a fault of tokenbudget's own, after what was finished
    return INTERRUPTED if report.interrupted else OK if report.ok else FAILED
