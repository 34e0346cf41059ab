"""``tokenbudget conform``: the model against a real engine, step by step (``harness.conform``).

The engines are the registry's that support conformance (``harness.registry``); one that
runs in a child process of its own has run this command again there (``engine_path``).
Exit status 0 when every workload agrees or each divergence is explained in SPEC.md,
1 when some divergence is unexplained; the engine missing is bad input (2).
"""
from __future__ import annotations

import argparse

from . import render
from .args import UsageError, add_json, at_most, folder, positive_int, seed, add_sync, apply_sync
from .console import Console
from .engine_path import add_engine_path, announce
from .exits import FAILED, OK
from .harness import registry
from .harness.conform import run_conformance
from .harness.engine_descriptor import CONFORM
from .spec.user_paths import writable_folder

HELP = "compare the model with a real engine step by step on seeded workloads"
DESCRIPTION = ("Run seeded workloads on the reference model and on a real engine's scheduler in lockstep, the model "
               "following the policy and version the engine's release maps to; compare grants, drafts, preemptions, "
               "finished requests and KV blocks in use per step. Each divergence is written as a trace and matched "
               "against the explanations in SPEC.md.")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    engines = registry.names(CONFORM)
    parser.add_argument("--engine", choices=engines, default=engines[0],
                        help="the real engine: " + "; ".join(f"{n}, {registry.engine(n).target_help}"
                                                             for n in engines) + f" (default {engines[0]})")
    parser.add_argument("--workloads", type=at_most(positive_int, 10**6), default=100, metavar="N",
                        help="workloads to run, at least 1 (default 100)")
    parser.add_argument("--seed", type=seed, default=0, help="workload stream (default 0)")
    parser.add_argument("--corpus", type=folder, metavar="DIR",
                        help="where divergence traces go (default: a new temp dir)")
    add_engine_path(parser)
    add_sync(parser, True)
    parser.add_argument("--radix-cache", choices=("on", "off"), default=None,
                        help=f"--engine {' or '.join(_prefix_cache_engines())} only: run the workloads with the "
                             "engine's prefix (radix) cache on (default, as it serves) or off")
    capacity = sorted({p for n in registry.names(CONFORM) for p in registry.engine(n).capacity_policies})
    parser.add_argument("--capacity-policy", choices=capacity, default=None,
                        help=f"--engine {' or '.join(_capacity_engines())} only: the engine's capacity scheduler "
                             "(default: the engine's own default)")
    add_json(parser)


def _capacity_engines() -> tuple[str, ...]:
    return tuple(n for n in registry.names(CONFORM) if registry.engine(n).capacity_policies)


def _prefix_cache_engines() -> tuple[str, ...]:
    return tuple(n for n in registry.names(CONFORM) if registry.engine(n).prefix_cache_switch)


def run(args: argparse.Namespace, console: Console) -> int:
    apply_sync(args, True)
    if args.corpus is not None:  # before any work
        writable_folder(args.corpus, "--corpus")
    engine = registry.engine(args.engine)
    if args.radix_cache is not None and not engine.prefix_cache_switch:
        raise UsageError(f"--radix-cache switches the prefix cache of {' or '.join(_prefix_cache_engines())}: use it "
                         f"with --engine {' or '.join(_prefix_cache_engines())}, not {args.engine}")
    if args.capacity_policy is not None and args.capacity_policy not in engine.capacity_policies:
        raise UsageError(f"--capacity-policy {args.capacity_policy} is not a capacity scheduler of {args.engine}: use it "
                         f"with --engine {' or '.join(_capacity_engines())}")
    announce(console, args.engine, args.engine_path)
    report = run_conformance(args.seed, args.workloads, args.corpus, console.progress,
                             engine=engine.conform_engine(args.engine_path, prefix_cache=args.radix_cache != "off",
                                                          capacity_policy=args.capacity_policy))
    if args.json:
        console.json(report.to_json())
    else:
        console.text(render.conform(report))
    return OK if report.ok else FAILED
