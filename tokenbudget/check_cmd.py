"""``tokenbudget check``: the policy x invariant matrix of ``check.run_check``.

Exit status 0 when every policy's row is ok, 1 when some row failed.
"""
from __future__ import annotations

import argparse

from . import render
from .args import add_database, add_json, add_policy
from .check import run_check
from .console import Console
from .exits import FAILED, INTERRUPTED, OK
from .fuzz.database import open_database

HELP = "replay the built-in corpus; a policy x invariant matrix"
DESCRIPTION = ("Replay the built-in corpus and print a policy x invariant matrix. A built-in policy is "
               "judged by its own corpus traces and their expectations. A user policy (pkg.module:Class) "
               "replays the ops of every corpus trace without expectations: any violation fails it, and "
               "traces whose config it refuses are skipped.")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_policy(parser, "check this policy (repeatable; default: every built-in)")
    add_database(parser)
    add_json(parser)


def run(args: argparse.Namespace, console: Console) -> int:
    report = run_check(args.policies, console.progress, open_database(args.database))
    if args.json:
        console.json(report.to_json())
    else:
        console.text(render.check(report))
    return INTERRUPTED if report.interrupted else OK if report.ok else FAILED
