"""The ``tokenbudget`` command.

Exit status: 0 every verdict is as expected (for replay: and nothing was violated); 1 a
violation or an unexpected verdict;
2 bad usage or bad input, with one line ``tokenbudget: error: ...`` on stderr and never a
traceback. ``--json`` prints exactly one JSON document on stdout and nothing else there.
Progress goes to stderr, and only when stderr is a terminal.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any, Callable, NoReturn

from . import fuzz_cmd, render, runner_cmd
from .proofs import prove as prove_cmd
from .check import CheckReport, run_check
from .conform_cmd import conform_command
from .model.target import ModelTarget
from .harness.vllm.engine import EngineUnavailable
from .harness.vllm.target import VllmTarget
from .model import ConfigError, builtin_policies
from .model.replay import BadInput, ReplayResult, replay_on_model
from .spec import INVARIANTS
from .spec.trace import Trace, TraceError, load_trace
from .exits import BAD_INPUT, FAILED, OK
from .targets import MODEL, RUNNER, TARGETS, VLLM


class UsageError(Exception):
    """Bad command-line usage (argparse's complaint, as one line)."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise UsageError(message)


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="tokenbudget", description="Token-budget invariants of speculative-decoding schedulers.")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    p = sub.add_parser("policies", help="list the built-in budget policies")
    p.add_argument("--json", action="store_true", help="print one JSON document")
    p.set_defaults(run=_policies)

    r = sub.add_parser("replay", help="replay trace files and judge them")
    r.add_argument("traces", nargs="+", metavar="TRACE", help="trace file (format tokenbudget.trace/1)")
    r.add_argument("--target", choices=TARGETS, default=MODEL,
                   help="what executes the trace: model, or runner (the model with a torch runner executing its steps)")
    r.add_argument("--device", choices=("cpu", "cuda"), help="device of the runner target")
    r.add_argument("--mode", choices=("forced", "live"),
                   help="mode of the runner and vllm targets: forced takes the accepted drafts from the trace "
                        "(default), live lets the runner's verification decide them")
    runner_cmd.add_arguments(r)
    r.add_argument("--policy", help="replay under this policy instead of the trace's (name or pkg.module:Class)")
    r.add_argument("--json", action="store_true", help="print one JSON document")
    r.set_defaults(run=_replay)

    c = sub.add_parser(
        "check", help="replay the built-in corpus; a policy x invariant matrix",
        description="Replay the built-in corpus and print a policy x invariant matrix. A built-in policy is "
                    "judged by its own corpus traces and their expectations. A user policy (pkg.module:Class) "
                    "replays the ops of every corpus trace without expectations: any violation fails it, and "
                    "traces whose config it refuses are skipped.")
    c.add_argument("--policy", action="append", dest="policies", default=[], metavar="P",
                   help="check this policy (repeatable; default: every built-in)")
    c.add_argument("--json", action="store_true", help="print one JSON document")
    c.set_defaults(run=_check)

    v = sub.add_parser(
        "prove", help="prove each policy's obligations with z3, or refute them with replaying traces",
        description="Decide every obligation of every policy (the safety invariants, config-sound and "
                    "config-complete, work-conserving, vllm-adaptive against vllm-static): proved for every config "
                    "and any number of requests, proved up to N requests, or refuted with a minimal trace that "
                    "replays. Built-in policies are judged against the verdict manifest; a user policy fails on a "
                    "refuted safety obligation. An unknown verdict (a z3 timeout) is a failure.")
    prove_cmd.add_arguments(v)
    v.set_defaults(run=_prove)

    f = sub.add_parser(
        "conform", help="compare the model with a real engine step by step on seeded workloads",
        description="Run seeded workloads on the reference model (vllm-adaptive) and on the real vLLM 0.32 "
                    "scheduler in lockstep; compare grants, drafts, preemptions and finished requests per step. "
                    "Each divergence is written as a trace and matched against the explanations in SPEC.md.")
    f.add_argument("--engine", choices=("vllm",), default="vllm", help="the real engine (only vllm)")
    f.add_argument("--workloads", type=_count, default=100, metavar="N", help="workloads to run (default 100)")
    f.add_argument("--seed", type=int, default=0, help="workload stream (default 0)")
    f.add_argument("--corpus", type=Path, metavar="DIR", help="where divergence traces go (default: a new temp dir)")
    f.add_argument("--json", action="store_true", help="print one JSON document")
    f.set_defaults(run=_conform)

    z = sub.add_parser(
        "fuzz", help="fuzz policies with Hypothesis; each counterexample becomes a trace",
        description="Drive a target step by step with Hypothesis-generated requests, steps and aborts, judging "
                    "every step with the spec. Each violated invariant is shrunk to a minimal trace, written to "
                    "the corpus folder with the Hypothesis program beside it; it replays with `tokenbudget "
                    "replay`. Exit 0 when nothing was violated, 1 when something was.")
    fuzz_cmd.add_arguments(z)
    z.set_defaults(run=_fuzz)
    return parser


def _count(text: str) -> int:
    """An argparse type: an integer >= 0."""
    if not text.isdigit():
        raise argparse.ArgumentTypeError(f"expected a whole number >= 0, got {text!r}")
    return int(text)


def main(argv: list[str] | None = None) -> int:
    """Run the command line; returns the exit status."""
    try:
        args = build_parser().parse_args(argv)
        return int(args.run(args))
    except (UsageError, TraceError, BadInput, ConfigError, EngineUnavailable) as e:
        return _error(str(e))
    except BrokenPipeError:  # the reader left early (`| head`): keep quiet, as other tools do
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return OK
    except OSError as e:
        return _error(f"cannot read {e.filename}: {e.strerror}" if e.filename else str(e))
    except SystemExit as e:  # --help
        return e.code if isinstance(e.code, int) else OK


def _error(message: str) -> int:
    print(f"tokenbudget: error: {' '.join(message.split())}", file=sys.stderr)
    return BAD_INPUT


def _progress() -> Callable[[str], None]:
    if not sys.stderr.isatty():
        return lambda _: None

    def show(message: str) -> None:
        sys.stderr.write(f"\r\033[K{message[:100]}")
        sys.stderr.flush()
    return show


def _done_progress() -> None:
    if sys.stderr.isatty():
        sys.stderr.write("\r\033[K")
        sys.stderr.flush()


def _print_json(doc: Any) -> None:
    print(json.dumps(doc, indent=2))


# -- commands ---------------------------------------------------------------------------
def _policies(args: argparse.Namespace) -> int:
    rows = [{"name": name, "engine": cls.engine, "version": cls.version, "description": cls.description}
            for name, cls in builtin_policies().items()]
    if args.json:
        _print_json({"policies": rows})
    else:
        print(render.policies(rows))
    return OK


def _replay(args: argparse.Namespace) -> int:
    if args.target not in TARGETS:
        raise UsageError(f"target {args.target} is not available yet; use --target model")
    problem = runner_cmd.usage_problem(args, len(args.traces))
    if args.target == VLLM and (args.device or args.mode == "live"):
        problem = "the vllm target runs vLLM's scheduler on the CPU with the trace's accepted drafts; " \
                  "--device and --mode live apply to --target runner"
    if problem is not None:
        raise UsageError(problem)
    traces: list[Trace] = [load_trace(path) for path in args.traces]
    progress = _progress()
    if args.target == RUNNER:
        code = runner_cmd.replay_command(args, traces, progress, _print_json)
        _done_progress()
        return code
    results: list[ReplayResult] = []
    for n, trace in enumerate(traces, 1):
        progress(f"replaying {n}/{len(traces)}: {trace.source}")
        results.append(replay_on_model(trace, args.policy, VllmTarget if args.target == VLLM else ModelTarget))
    _done_progress()
    # A replay passes only when every expectation is met and nothing was violated: a trace
    # that shows an (expected) violation still exits 1, as a failing counterexample should.
    ok = all(r.ok and not r.violations and not r.errors for r in results)
    if args.json:
        _print_json({"ok": ok, "target": args.target, "traces": [r.to_json() for r in results]})
    else:
        print("\n\n".join(render.replay(r, t.description) for r, t in zip(results, traces)))
    return OK if ok else FAILED


def _check(args: argparse.Namespace) -> int:
    report: CheckReport = run_check(args.policies, _progress())
    _done_progress()
    if args.json:
        _print_json({
            "ok": report.ok,
            "invariants": [{"id": inv.id, "kind": inv.kind} for inv in INVARIANTS.values()],
            "policies": [{"policy": r.policy, "user": r.user, "cells": r.cells, "traces": r.traces,
                          "ok": r.ok, "failures": r.failures} for r in report.rows],
            "skipped": report.skipped,
            "replays": [r.to_json() for r in report.replays],
        })
    else:
        print(render.check(report))
    return OK if report.ok else FAILED


def _prove(args: argparse.Namespace) -> int:
    code = prove_cmd.prove_command(args, _progress(), _print_json)
    _done_progress()
    return code


def _conform(args: argparse.Namespace) -> int:
    code = conform_command(args, _progress(), _print_json)
    _done_progress()
    return code


def _fuzz(args: argparse.Namespace) -> int:
    code = fuzz_cmd.fuzz_command(args, _progress(), _print_json)
    _done_progress()
    return code


if __name__ == "__main__":
    sys.exit(main())
