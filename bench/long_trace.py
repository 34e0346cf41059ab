"""A valid long trace: N requests arriving over time, for the replay benchmark.

Run after ``pip install -e .``::

    python bench/long_trace.py N OUT.json [--seed N] [--accepted-per-step N] [--at-once]

The workload (deterministic from ``--seed``): vllm-adaptive with ngram k=4, B=2048,
S=64, block 16, 4096 KV blocks, prefix caching on. Before each step, requests arrive
(0, 1 or 2, one on average) until N have; every third shares a two-block system prompt.
Prompts are 16..512 tokens, max_tokens 4..64. Each step op accepts 1..k drafts for up to
``--accepted-per-step`` of the requests added last (the rest accept none), which makes
the file as large as wanted. After the last arrival the trace runs drain steps, enough
for every request to finish. ``--at-once`` queues all N requests before the first step
instead (none shares a prefix or accepts drafts) and then runs N * (mean max_tokens + 2) / S
+ 400 steps: the longest waiting queue the workload can have.
"""
from __future__ import annotations

import argparse
import random
import sys
from typing import Any

from tokenbudget.spec.trace import AddOp, Op, StepOp, Trace, write_trace

CONFIG: dict[str, Any] = {
    "max_num_batched_tokens": 2048, "max_num_seqs": 64, "num_speculative_tokens": 4, "method": "ngram",
    "block_size": 16, "num_kv_blocks": 4096, "max_model_len": 1024,
}
POLICY = "vllm-adaptive"
PROMPT_LEN = (16, 512)
MAX_TOKENS = (4, 64)
DRAIN_STEPS = 400


def long_trace(num_requests: int, seed: int = 0, accepted_per_step: int = 8, at_once: bool = False) -> Trace:
    """The benchmark workload of ``num_requests`` requests as a Trace."""
    rng = random.Random(seed)
    if at_once:
        return queued_at_once(num_requests, rng, seed)
    k = CONFIG["num_speculative_tokens"]
    ops: list[Op] = []
    added = 0
    while added < num_requests:
        for _ in range(min(rng.choice((0, 1, 2)), num_requests - added)):
            prompt = rng.randint(*PROMPT_LEN)
            shared = added % 3 == 0
            ops.append(AddOp(f"r{added}", prompt, rng.randint(*MAX_TOKENS), prefix_group="sys" if shared else None,
                             prefix_len=min(prompt, 2 * CONFIG["block_size"]) if shared else 0))
            added += 1
        recent = range(max(0, added - accepted_per_step), added)
        ops.append(StepOp({f"r{i}": rng.randint(1, k) for i in recent}))
    ops += [StepOp() for _ in range(DRAIN_STEPS)]
    return Trace(policy=POLICY, config=dict(CONFIG), ops=tuple(ops),
                 description=f"{num_requests} requests arriving over time (bench/long_trace.py, seed {seed})")


def queued_at_once(num_requests: int, rng: random.Random, seed: int) -> Trace:
    ops: list[Op] = [AddOp(f"r{i}", rng.randint(*PROMPT_LEN), rng.randint(*MAX_TOKENS)) for i in range(num_requests)]
    mean_steps = sum(MAX_TOKENS) / 2 + 2
    ops += [StepOp() for _ in range(round(num_requests * mean_steps / CONFIG["max_num_seqs"]) + DRAIN_STEPS)]
    return Trace(policy=POLICY, config=dict(CONFIG), ops=tuple(ops),
                 description=f"{num_requests} requests queued at once (bench/long_trace.py --at-once, seed {seed})")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("requests", type=int)
    parser.add_argument("out", help="the trace file to write (never overwritten)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--accepted-per-step", type=int, default=8)
    parser.add_argument("--at-once", action="store_true", help="queue every request before the first step")
    args = parser.parse_args(argv)
    try:
        write_trace(long_trace(args.requests, args.seed, args.accepted_per_step, args.at_once), args.out)
    except FileExistsError:
        print(f"long_trace: {args.out} exists; choose a new name", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
