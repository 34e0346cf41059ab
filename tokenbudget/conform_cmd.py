"""``tokenbudget conform``: the model against a real engine, step by step (``harness.conform``).

Exit status 0 when every workload agrees or each divergence is explained in SPEC.md,
1 when some divergence is unexplained; vLLM missing is bad input (2).
"""
from __future__ import annotations

import argparse
from pathlib import Path

from . import render
from .args import add_json, at_most, seed, whole
from .console import Console
from .engine_path import add_engine_path
from .exits import FAILED, OK
from .harness.conform import run_conformance
from .targets import VLLM

HELP = "compare the model with a real engine step by step on seeded workloads"
DESCRIPTION = ("Run seeded workloads on the reference model (vllm-adaptive) and on the real vLLM scheduler "
               "(the importable one, or the one in --engine-path) in lockstep, the model following the modelled "
               "vLLM version nearest to it; compare grants, drafts, preemptions and finished requests per step. "
               "Each divergence is written as a trace and matched against the explanations in SPEC.md.")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--engine", choices=(VLLM,), default=VLLM, help="the real engine (only vllm)")
    parser.add_argument("--workloads", type=at_most(whole, 10**6), default=100, metavar="N", help="workloads to run (default 100)")
    parser.add_argument("--seed", type=seed, default=0, help="workload stream (default 0)")
    parser.add_argument("--corpus", type=Path, metavar="DIR",
                        help="where divergence traces go (default: a new temp dir)")
    add_engine_path(parser)
    add_json(parser)


def run(args: argparse.Namespace, console: Console) -> int:
    report = run_conformance(args.seed, args.workloads, args.corpus, console.progress)
    if report.warning:
        console.warn(report.warning)
    if args.json:
        console.json(report.to_json())
    else:
        console.text(render.conform(report))
    return OK if report.ok else FAILED
