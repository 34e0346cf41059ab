"""Profile: what one prefill step of the torch runner costs by chunk size and context.

    python bench/bench_whatif_steps.py [--prompt N] [--repeats R]

Runs one lone prompt under budgets of 16, 64, 128 and 250 tokens (the torch runner, model
tiny, one CPU thread, each step timed on the thread's CPU clock), R times, and prints the
median milliseconds of each chunk at the context nearest each row's, and the cost of a query-key pair: the
step's time past the same chunk's at context 0, divided by the chunk x context pairs. A
rise of that cost with context is what ``StepShape.pairs_past_cached_keys`` models.
"""
from __future__ import annotations

import argparse
from collections import defaultdict

import numpy as np

from tokenbudget.kernels.target import RunnerOptions
from tokenbudget.whatif.workload import RequestSpec, Workload
from tokenbudget.whatif_runner import ACCEPTANCE, RUNNER_CONFIG, measure, one_thread

CHUNKS = (16, 64, 128, 250)


def profile(prompt: int, repeats: int) -> dict[tuple[int, int], float]:
    """Median CPU seconds of each (chunk, context) prefill step that is not a prompt's last."""
    seconds: dict[tuple[int, int], list[float]] = defaultdict(list)
    load = Workload((RequestSpec("p", 0.0, prompt, 2),), 1, ACCEPTANCE, 0)
    with one_thread():
        measure(RUNNER_CONFIG, "vllm-adaptive", load, RunnerOptions(), "cpu")  # warm-up, not kept
        for _ in range(repeats):
            for chunk in CHUNKS:
                cfg = RUNNER_CONFIG.replace(max_num_batched_tokens=chunk, max_num_seqs=1, num_speculative_tokens=0,
                                            method=None)
                run = measure(cfg, "vllm-adaptive", load, RunnerOptions(), "cpu")
                for shape, step in zip(run.step_shapes, np.diff(run.step_end_s, prepend=0.0)):
                    if shape.prefill_tokens == chunk and not shape.sampled_seqs:
                        seconds[chunk, shape.kv_tokens - chunk].append(float(step))
    return {key: float(np.median(v)) for key, v in seconds.items()}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prompt", type=int, default=2040)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    steps = profile(args.prompt, args.repeats)
    contexts = range(0, args.prompt, 250)
    print("context " + "".join(f"{f'chunk {c} ms':>14}{'us/pair':>9}" for c in CHUNKS))
    for ctx in contexts:
        cells = []
        for chunk in CHUNKS:
            near = min((c for k, c in steps if k == chunk), key=lambda c: abs(c - ctx), default=None)
            ms = steps.get((chunk, near)) if near is not None else None
            pair = (ms - steps[chunk, 0]) / (chunk * near) * 1e6 if ms is not None and near else None
            cells.append(f"{'-' if ms is None else f'{ms * 1e3:.1f}':>14}{'-' if pair is None else f'{pair:.3f}':>9}")
        print(f"{ctx:>7} " + "".join(cells))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
