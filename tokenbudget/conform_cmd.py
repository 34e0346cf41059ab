"""``tokenbudget conform``: the model against a real engine, step by step (``harness.conform``).

Exit status 0 when every workload agrees or each divergence is explained in SPEC.md,
1 when some divergence is unexplained; the engine missing is bad input (2).
"""
from __future__ import annotations

import argparse
import os
from pathlib import Path

from . import render
from .args import UsageError, add_json, at_most, folder, positive_int, seed
from .console import Console
from .engine_path import in_child, run_child, run_in_child
from .exits import FAILED, OK
from .harness.conform import run_conformance
from .harness.fastdeploy import runtime as fastdeploy_runtime
from .harness.fastdeploy.conform import fastdeploy_engine
from .harness.sglang.conform import sglang_engine
from .harness.trtllm import runtime as trtllm_runtime
from .harness.trtllm.conform import trtllm_engine
from .harness.trtllm.engine import CAPACITY_POLICIES
from .model.trtllm.deployments import GUARANTEED_NO_EVICT
from .harness.sglang.runtime import CHILD_ENV, check_folder
from .spec.user_paths import writable_folder
from .targets import ENGINES, FASTDEPLOY, SGLANG, TRTLLM, VLLM

HELP = "compare the model with a real engine step by step on seeded workloads"
DESCRIPTION = ("Run seeded workloads on the reference model and on a real engine's scheduler in lockstep: vLLM "
               "(the importable one, or the one in --engine-path; the model runs vllm-adaptive at the modelled "
               "vLLM version nearest to it) or SGLang 0.5.23 (--engine sglang: its PrefillAdder, check_decode_mem "
               "and retract_decode with CPU allocators, from --engine-path, $TOKENBUDGET_SGLANG_PATH or "
               ".engines/sglang-0.5.23; the model runs sglang-0.5.23); compare grants, drafts, preemptions, "
               "finished requests and KV blocks in use per step; or FastDeploy (--engine fastdeploy: its ResourceManagerV1.schedule() with "
               "Paddle's CPU wheel, from --engine-path DIR or $TOKENBUDGET_FASTDEPLOY_PATH, a folder holding its "
               "fastdeploy/ package; the model follows that commit); or TensorRT-LLM (--engine trtllm: its scheduler.py's "
               "SimpleUnifiedScheduler under --capacity-policy, from --engine-path DIR, $TOKENBUDGET_TRTLLM_PATH or "
               ".engines/tensorrt-llm-002f3cc3; the model runs trtllm). With --engine sglang the workloads run "
               "SGLang's radix cache on (its default) or, with --radix-cache off, off (--disable-radix-cache). "
               "Each divergence is written as a trace and "
               "matched against the explanations in SPEC.md.")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--engine", choices=ENGINES, default=VLLM, help="the real engine (default vllm)")
    parser.add_argument("--workloads", type=at_most(positive_int, 10**6), default=100, metavar="N",
                        help="workloads to run, at least 1 (default 100)")
    parser.add_argument("--seed", type=seed, default=0, help="workload stream (default 0)")
    parser.add_argument("--corpus", type=folder, metavar="DIR",
                        help="where divergence traces go (default: a new temp dir)")
    parser.add_argument("--engine-path", type=folder, metavar="DIR", dest="engine_dir",
                        help="the engine's folder: for vllm an unpacked wheel or a vLLM checkout (run in a child "
                             "process); for sglang a pip --target folder holding sglang; for fastdeploy a "
                             "FastDeploy checkout's root (a folder holding fastdeploy/); for trtllm a folder holding "
                             "tensorrt_llm/ (an install's site-packages or the unpacked archive)")
    parser.add_argument("--radix-cache", choices=("on", "off"), default=None,
                        help="--engine sglang only: run the workloads with SGLang's radix cache on (default, as "
                             "SGLang serves) or off (its --disable-radix-cache)")
    parser.add_argument("--capacity-policy", choices=CAPACITY_POLICIES, default=None,
                        help="--engine trtllm only: TensorRT-LLM's capacity scheduler (default GUARANTEED_NO_EVICT, "
                             "its default; MAX_REQUESTS is the scheduler without a KV manager)")
    add_json(parser)


def run(args: argparse.Namespace, console: Console) -> int:
    if args.corpus is not None:  # before any work
        writable_folder(args.corpus, "--corpus")
    if args.radix_cache is not None and args.engine != SGLANG:
        raise UsageError(f"--radix-cache is SGLang's radix cache: use it with --engine sglang, not {args.engine}")
    if args.capacity_policy is not None and args.engine != TRTLLM:
        raise UsageError(f"--capacity-policy is TensorRT-LLM's: use it with --engine trtllm, not {args.engine}")
    if args.engine == TRTLLM:  # in this process: the stand-ins touch only tensorrt_llm.*
        report = run_conformance(args.seed, args.workloads, args.corpus, console.progress,
                                 engine=trtllm_engine(trtllm_runtime.check_folder(args.engine_dir),
                                                      args.capacity_policy or GUARANTEED_NO_EVICT))
    elif args.engine == SGLANG:
        folder = check_folder(args.engine_dir)
        if os.environ.get(CHILD_ENV) != str(folder):  # SGLang runs in a child process (runtime.py: the stub)
            return run_child(_argv(args, folder), {**os.environ, CHILD_ENV: str(folder)}, console.out)
        report = run_conformance(args.seed, args.workloads, args.corpus, console.progress,
                                 engine=sglang_engine(folder, radix=args.radix_cache != "off"))
    elif args.engine == FASTDEPLOY:
        folder = fastdeploy_runtime.check_folder(args.engine_dir)
        if os.environ.get(fastdeploy_runtime.CHILD_ENV) != str(folder):  # FastDeploy runs in a child (the stubs)
            return run_child(_argv(args, folder), fastdeploy_runtime.child_env(folder), console.out)
        report = run_conformance(args.seed, args.workloads, args.corpus, console.progress,
                                 engine=fastdeploy_engine(folder))
    elif args.engine_dir is not None and not in_child(args.engine_dir):
        return run_in_child(args.engine_dir, _argv(args))
    else:
        report = run_conformance(args.seed, args.workloads, args.corpus, console.progress)
    if report.warning:
        console.warn(report.warning)
    if args.json:
        console.json(report.to_json())
    else:
        console.text(render.conform(report))
    return OK if report.ok else FAILED


def _argv(args: argparse.Namespace, folder: Path | None = None) -> list[str]:
    """This command line again, for the child that runs the engine in ``folder``."""
    argv = ["conform", "--engine", args.engine, "--workloads", str(args.workloads), "--seed", str(args.seed),
            "--engine-path", str(folder or args.engine_dir)]
    if args.corpus is not None:
        argv += ["--corpus", str(args.corpus)]
    if args.radix_cache is not None:
        argv += ["--radix-cache", args.radix_cache]
    return argv + ["--json"] * bool(args.json) + ["--quiet"] * bool(args.quiet)
