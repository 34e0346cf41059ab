"""Argument types and options shared by the commands, and the one ``UsageError``.

A type refuses a bad value with ``argparse.ArgumentTypeError``; the parser turns it, like
every other complaint of argparse, into a ``UsageError`` (one line, exit status 2).
"""
from __future__ import annotations

import argparse
import os
import math
from pathlib import Path
from typing import Any, Callable

from .fuzz.database import default_database
from .model import user_code


class UsageError(Exception):
    """Bad command-line usage, said in one line: argparse's complaint or a command's."""


def whole(text: str) -> int:
    """An integer >= 0."""
    if not (text.isascii() and text.isdigit()):
        raise argparse.ArgumentTypeError(f"expected a whole number >= 0, got {text[:40]!r}")
    return int(text)


def positive_int(text: str) -> int:
    """An integer > 0."""
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value <= 0:
        raise argparse.ArgumentTypeError(f"expected a number > 0, got {text[:40]!r}")
    return value


def positive_float(text: str) -> float:
    """A finite number > 0 (nan and inf refused)."""
    try:
        value = float(text)
    except ValueError:
        value = 0.0
    if not (math.isfinite(value) and value > 0):
        raise argparse.ArgumentTypeError(f"expected a finite number > 0, got {text[:40]!r}")
    return value


def folder(text: str) -> Path:
    """A folder's path. An empty one, which would mean the current folder, is refused: files
    would land among the user's own."""
    if not text:
        raise argparse.ArgumentTypeError("expected a folder, got an empty path; name one (. for the current folder)")
    return Path(text)


def at_most(parse: Callable[[str], Any], limit: float) -> Callable[[str], Any]:
    """``parse``, refusing a value above ``limit`` (a bound no sensible run needs: a typo,
    not a request)."""

    def bounded(text: str) -> Any:
        value = parse(text)
        if value > limit:
            shown = f"{limit:,}" if isinstance(limit, int) else f"{limit:g}"
            raise argparse.ArgumentTypeError(f"expected at most {shown}, got {text[:40]!r}")
        return value

    bounded.__name__ = parse.__name__
    return bounded


MAX_SEED = 2**63 - 1


def seed(text: str) -> int:
    """A seed: a whole number below 2**63."""
    return at_most(whole, MAX_SEED)(text)


MAX_POLICY_TIMEOUT_S = 86400.0


def add_policy(parser: argparse.ArgumentParser, help: str, repeatable: bool = True) -> None:
    """``--policy P``: a built-in name or ``pkg.module:Class``; repeatable into ``args.policies``,
    else one into ``args.policy``. ``--policy-timeout S``: the limit of one call into a user
    policy (``model.user_code``)."""
    if repeatable:
        parser.add_argument("--policy", action="append", dest="policies", default=[], metavar="P", help=help)
    else:
        parser.add_argument("--policy", metavar="P", help=help)
    parser.add_argument("--policy-timeout", type=at_most(positive_float, MAX_POLICY_TIMEOUT_S), metavar="SECONDS",
                        help=f"fail a user policy as policy-error when one call into it runs longer "
                             f"(default {user_code.DEFAULT_LIMIT_S:g})")


def add_json(parser: argparse.ArgumentParser) -> None:
    """``--json``: the result as one JSON document, the only thing on stdout."""
    parser.add_argument("--json", action="store_true", help="print one JSON document")


def add_database(parser: argparse.ArgumentParser) -> None:
    """``--database PATH|redis://HOST:PORT/N|none``: the Hypothesis example database, by name
    (``fuzz.database``); checked when the command opens it."""
    parser.add_argument("--database", default=default_database(), metavar="PATH|URL",
                        help="the example database that failing examples are replayed from and kept in: a folder, "
                             "redis://HOST:PORT/N shared by many machines, or none (default: %(default)s)")


MAX_WORK_GAP = 2**24  # tokens: past any budget B


def add_verdict_options(parser: argparse.ArgumentParser) -> None:
    """``--strict`` and ``--max-work-gap N``: the options of the one verdict rule (``tokenbudget.verdict``)."""
    parser.add_argument("--strict", action="store_true",
                        help="fail on known violations too (README: How a verdict is reached)")
    add_max_work_gap(parser)


def add_max_work_gap(parser: argparse.ArgumentParser) -> None:
    """``--max-work-gap N``: the tokens of work a user policy may leave undone in a step
    beyond its base policy on the same state (a whole number, at most MAX_WORK_GAP)."""
    parser.add_argument("--max-work-gap", type=max_work_gap, default=0, metavar="N",
                        help="accept a user policy leaving up to N more tokens of work undone in a step than its "
                             "base policy on the same state (default 0)")


def max_work_gap(text: str) -> int:
    """A work gap in tokens: a whole number up to MAX_WORK_GAP."""
    return at_most(whole, MAX_WORK_GAP)(text)


def add_sync(parser: argparse.ArgumentParser, default_async: bool) -> None:
    """``--async`` / ``--sync``: which of vLLM's schedulers the vLLM target runs (without
    either: async where ``default_async``, else as the trace's config says); read by the vLLM
    harness in this process and its children."""
    default = "async, as vLLM deploys" if default_async else "as the trace's config says"
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--async", dest="run_async", action="store_true",
                      help="vLLM only: run its AsyncScheduler, as vLLM serves by default (outputs one step late; "
                           f"default: {default})")
    mode.add_argument("--sync", action="store_true",
                      help="vLLM only: run its synchronous Scheduler")


def apply_sync(args: argparse.Namespace, default_async: bool) -> None:
    """Carry ``--async`` or ``--sync`` to the vLLM harness (``harness.vllm.async_runner.SYNC_ENV``);
    without either, ``--async`` where ``default_async``, else the config's own choice."""
    from .harness.vllm.async_runner import SYNC_ENV

    if getattr(args, "run_async", False) or (default_async and not getattr(args, "sync", False)):
        os.environ[SYNC_ENV] = "0"
    elif getattr(args, "sync", False):
        os.environ[SYNC_ENV] = "1"
