"""Benchmark: replay throughput of the torch runner, in tokens per second.

Run after ``pip install -e .``::

    python bench/bench_runner.py [--device cpu|cuda] [--model tiny|wide] [--steps N] [--seed N] [--json]

The workload (deterministic from ``--seed``): vllm-adaptive with B=512, S=32, eagle3 with
k=3 and serial drafting, 16-token blocks, a 1024-block KV pool, max_model_len 1024; 64
requests at the start (prompts of 1-256 tokens, 32 outputs each), then ``--steps`` steps
(default 200) with the seeded arrivals of ``--steps`` in ``tokenbudget replay`` (a request
before a step with probability 1/2, prompts of 1-256 tokens, 1-32 outputs). It runs in
live mode with greedy acceptance, so the runner's own verification decides the accepted
drafts. On the CPU torch runs one intra-op thread, as the CLI does.

Reported: the model sizes; scheduled tokens per second (prompt chunks and decode rows the
target computed), committed tokens per second (tokens appended to sequences), runner rows
per second, the acceptance rate; timed over the runner's steps only (each step's
``execute``, scheduling excluded). Exit status 1 when the runner faulted, 2 when the
device is not available.
"""
from __future__ import annotations

import argparse
import json
import random
import sys
import time

import torch

from tokenbudget.kernels.models import MODEL_SPECS
from tokenbudget.kernels.target import RunnerOptions
from tokenbudget.kernels.arrivals import extend
from tokenbudget.kernels.replay import replay_on_runner
from tokenbudget.spec.trace import AddOp, Trace

CONFIG = {"max_num_batched_tokens": 512, "max_num_seqs": 32, "num_speculative_tokens": 3, "method": "eagle3",
          "block_size": 16, "num_kv_blocks": 1024, "max_model_len": 1024}
BURST = 64  # requests waiting at the start, so that the first steps fill B


def workload(steps: int, seed: int) -> Trace:
    rng = random.Random(seed)
    burst = tuple(AddOp(f"b{i}", rng.randint(1, 256), 32) for i in range(BURST))
    return extend(Trace(policy="vllm-adaptive", config=CONFIG, ops=burst), steps, seed)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    parser.add_argument("--model", choices=tuple(MODEL_SPECS), default="tiny")
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", action="store_true", help="print one JSON document")
    args = parser.parse_args()
    if args.device == "cuda" and not torch.cuda.is_available():
        print("bench_runner: no CUDA device is available; use --device cpu", file=sys.stderr)
        return 2
    if args.device == "cpu":
        torch.set_num_threads(1)
    trace = workload(args.steps, args.seed)
    start = time.perf_counter()
    result, target = replay_on_runner(trace, RunnerOptions(device=args.device, mode="live", model=args.model,
                                                           seed=args.seed))
    wall = time.perf_counter() - start
    assert target is not None
    report = target.report
    steps = [s for s in report.steps if s.fault is None]
    seconds = sum(s.seconds for s in steps)
    scheduled, committed = report.throughput()
    doc = {
        "device": args.device, "model": args.model, "model_sizes": report.model.describe(),
        "config": CONFIG, "steps": len(steps), "runner_seconds": seconds, "wall_seconds": wall,
        "scheduled_tokens": sum(s.tokens for s in steps), "committed_tokens": sum(s.committed for s in steps),
        "scheduled_tokens_per_second": scheduled, "committed_tokens_per_second": committed,
        "rows_per_second": sum(s.total_rows for s in steps) / seconds if seconds else 0.0,
        "acceptance": report.acceptance, "fault": report.fault, "errors": list(result.errors),
    }
    if args.json:
        print(json.dumps(doc, indent=2))
    else:
        print(f"runner on {args.device}, model {args.model}: {doc['model_sizes']}")
        print(f"workload: vllm-adaptive B=512 S=32 eagle3 k=3, {BURST} requests then arrivals, "
              f"{len(steps)} live steps (seed {args.seed})")
        print(f"scheduled tokens: {doc['scheduled_tokens']} in {seconds:.2f} s of runner time "
              f"= {scheduled:.0f} tokens/s ({doc['rows_per_second']:.0f} rows/s)")
        acceptance = f"{report.acceptance:.2f}" if report.acceptance is not None else "- (no draft verified)"
        print(f"committed tokens: {doc['committed_tokens']} = {committed:.0f} tokens/s; acceptance {acceptance}")
        print(f"wall time {wall:.2f} s (model construction and scheduling included); runner verdict "
              f"{report.fault or 'ok'}")
    return 0 if not result.errors else 1


if __name__ == "__main__":
    sys.exit(main())
