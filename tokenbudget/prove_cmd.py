"""``tokenbudget prove``: every obligation of every policy, a verdict each (``proofs.prove``).

Built-in policies are judged against the verdict manifest; a user policy fails on an
unknown verdict and on a refutation whose verdict fails (``tokenbudget/verdict.py``, the
one rule; ``--strict``, ``--max-work-gap``). Exit status 0 when every verdict is as
expected, 1 otherwise. ``--update-manifest`` proves every built-in obligation and records
the verdicts as the manifest instead; it refuses (1) when a verdict is unknown.
"""
from __future__ import annotations

import argparse

from . import render
from .args import (UsageError, add_json, add_policy, add_verdict_options, at_most, folder, positive_float,
                   positive_int)
from .console import Console
from .exits import FAILED, INTERRUPTED, OK
from .model import builtin_policies
from .proofs import manifest
from .proofs.obligations import Options
from .proofs.prove import ProveInterrupted, default_jobs, emit, obligation_ids, prove
from .proofs.solving import Z3_VERSION
from .proofs.verdicts import UNKNOWN
from .spec.user_paths import writable_folder
from .verdict import judge

MAX_REQUESTS = 64  # symbolic requests of the bounded proofs: past some 32, z3 takes hours

HELP = "prove each policy's obligations with z3, or refute them with replaying traces"
DESCRIPTION = ("Decide every obligation of every policy (the safety invariants, config-sound and "
               "config-complete, work-conserving, the adaptive budget against the static one): proved for every config "
               "and any number of requests, proved up to N requests, or refuted with a minimal trace that "
               "replays. Built-in policies are judged against the verdict manifest; a user policy fails on "
               "every refutation that is its own or a gap over its base, as check and fuzz judge it. An unknown "
               "verdict (a z3 timeout) is a failure.")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_policy(parser, "prove this policy (repeatable; a name or pkg.module:Class; default: every built-in)")
    parser.add_argument("--invariant", action="append", dest="obligations", default=[], metavar="I",
                        help=f"only this obligation (repeatable): {', '.join(obligation_ids())}")
    parser.add_argument("--max-requests", type=at_most(positive_int, MAX_REQUESTS), default=Options.max_requests, metavar="N",
                        help=f"bound of the bounded proofs and the counterexample search (default "
                             f"{Options.max_requests})")
    parser.add_argument("--timeout", type=at_most(positive_float, 86400.0), default=Options.timeout_s, metavar="S",
                        help=f"seconds z3 may spend on one query; a timeout is an unknown verdict, a failure "
                             f"(default {Options.timeout_s:g})")
    parser.add_argument("--emit-traces", type=folder, metavar="DIR",
                        help="write every counterexample as a trace file in DIR (never overwrites a file)")
    parser.add_argument("--update-manifest", action="store_true",
                        help="prove every obligation of every built-in policy, one at a time, and record the "
                             "verdicts and seconds in tokenbudget/proofs/manifest.json (refused when a verdict is unknown)")
    add_verdict_options(parser)
    add_json(parser)


def run(args: argparse.Namespace, console: Console) -> int:
    options = Options(max_requests=args.max_requests, timeout_s=args.timeout)
    if args.update_manifest:
        return _update_manifest(args, options, console)
    unknown = [name for name in args.obligations if name not in obligation_ids()]
    if unknown:
        raise UsageError(f"unknown obligation {unknown[0]!r}; known: {', '.join(obligation_ids())}")
    if args.emit_traces is not None:  # before any work
        writable_folder(args.emit_traces, "--emit-traces")
    policies = list(dict.fromkeys(args.policies)) or list(builtin_policies())
    interrupted = None
    try:
        outcomes = prove(policies, options, list(dict.fromkeys(args.obligations)) or None, default_jobs(),
                         console.progress)
    except ProveInterrupted as e:
        outcomes = e.outcomes
        interrupted = f"{e.policies_done} of {len(policies)} policies proved"
    try:
        written = emit(outcomes, args.emit_traces) if args.emit_traces is not None else []
    except FileExistsError as e:
        raise UsageError(f"{e.filename} exists; --emit-traces never overwrites a file (choose an empty directory)") \
            from None
    judgement = judge(outcomes, args.max_work_gap, args.strict)
    if args.json:
        console.json({"ok": judgement.ok and not interrupted, "z3": Z3_VERSION, "max_requests": options.max_requests,
                      "timeout_s": options.timeout_s, **judgement.to_json(),
                      "traces_written": [str(p) for p in written], "interrupted": interrupted})
    else:
        console.text(render.prove(judgement, written, interrupted))
    return INTERRUPTED if interrupted else OK if judgement.ok else FAILED


def _update_manifest(args: argparse.Namespace, options: Options, console: Console) -> int:
    given = [flag for flag, value in (("--policy", args.policies), ("--invariant", args.obligations),
                                      ("--emit-traces", args.emit_traces)) if value]
    if given:
        raise UsageError(f"--update-manifest proves every built-in obligation; drop {', '.join(given)}")
    # one process: the recorded seconds are those of an undisturbed sequential run
    outcomes = prove(list(builtin_policies()), options, jobs=1, progress=console.progress)
    unknown = [o for o in outcomes if o.verdict == UNKNOWN]
    if not unknown:
        manifest.dump(outcomes, options.max_requests, manifest.PATH)
    if args.json:
        console.json({"ok": not unknown, "manifest": manifest.PATH, "recorded": 0 if unknown else len(outcomes),
                      "unknown": [o.to_json() for o in unknown]})
    else:
        console.text(render.manifest_update(len(outcomes), manifest.PATH, unknown))
    return FAILED if unknown else OK
