"""Benchmark: fuzzing on 1 and on 2 worker processes (``tokenbudget fuzz --workers``).

Run after ``pip install -e .``::

    python bench/bench_workers.py [--workers 1 2] [--examples 60] [--seeds 3] [--cap 60] [--json]

Throughput: every worker fuzzes ``--examples`` examples of THROUGHPUT_POLICY (one the
fuzzer finds nothing wrong with, so no shrinking interferes) on its own seed stream; the
steps of all workers over the wall-clock seconds of the longest session (process start
excluded). A step costs what its drawn workload costs, so the speed-up compares the same
work: the seconds the n seed streams take one after another, each on one worker alone,
over the seconds the n workers take together; for ``--seeds`` seeds, and their median.
It scales with the workers up to the cores when nothing else runs on them; the machine's
own speed-up on as many processes of pure arithmetic is printed beside it (virtual cores
seldom give n times one).

Time to the first counterexample: for each known-bad policy of KNOWN_BAD and its
invariant, the wall-clock seconds from launching the workers until one of them first
sees the invariant violated (its session's own first sighting, before any reduction;
process start included, and given as ``startup``), every other kind treated as known, no
shrinking; the median
over ``--seeds`` seeds, each run capped at ``--cap`` seconds (None: not found).
"""
from __future__ import annotations

import argparse
import json
import signal
import statistics
import sys
import time
from typing import Any

from hypothesis import Phase

from tokenbudget.fuzz.failures import FAILURE_CLASSES
from tokenbudget.fuzz.parallel import Job, fuzz_workers, receive, start_workers, stop_workers, stream_seed
from tokenbudget.fuzz.session import fuzz
from tokenbudget.model.target import ModelTarget

THROUGHPUT_POLICY = "fastdeploy-decode-count"
KNOWN_BAD = {policy: "input-rows-cap" for policy in (
    "vllm-static", "fastdeploy-v0", "fastdeploy-reserve", "fastdeploy-reserve-cherrypick", "fastdeploy-mtp-only")}
SEARCH = (Phase.explicit, Phase.generate, Phase.target)


def throughput(workers: int, examples: int, seed: int) -> dict[str, Any]:
    job = Job((THROUGHPUT_POLICY,), ModelTarget, "model", examples, None, seed, "none")
    report = fuzz_workers(job, workers)[0]
    return {"workers": workers, "seed": seed, "examples": report.examples, "steps": report.steps,
            "seconds": round(report.seconds, 2), "steps_per_second": round(report.steps_per_second, 1)}


def _spin(loops: int, out: Any) -> None:
    started = time.perf_counter()
    total = 0
    for i in range(loops):
        total += i * i
    out.put(time.perf_counter() - started)


def ceiling(workers: int, loops: int = 10_000_000, rounds: int = 5) -> float:
    """The machine's own speed-up on ``workers`` processes of pure-Python arithmetic (no
    memory, no queue): what the cores give when nothing is shared, the yardstick for the
    fuzz workers' speed-up; the median of ``rounds`` alternated pairs (a shared host's
    cores vary by tens of percent from one second to the next)."""
    def run(n: int) -> float:
        out, processes = start_workers(_spin, [(loops,)] * n)
        seconds = max(out.get() for _ in processes)
        stop_workers(processes)
        return seconds
    return round(statistics.median(workers * run(1) / run(workers) for _ in range(rounds)), 2)


def _search_worker(policy: str, kind: str, cap: float, seed: int, worker: int, events: Any) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    started = time.time()
    report = fuzz(policy, seconds=cap, seed=stream_seed(seed, worker), known=frozenset(FAILURE_CLASSES) - {kind},
                  phases=SEARCH, stop_when_found=frozenset({kind}))
    events.put(("report", worker, started, report))
    events.put(("done", worker))


def first_counterexample(policy: str, kind: str, workers: int, cap: float, seed: int) -> tuple[float | None, float]:
    """Seconds from launch until a worker first saw ``kind`` (None past ``cap``; the first
    worker to report it counts), and from launch until that worker's session began."""
    launched = time.time()
    events, processes = start_workers(_search_worker, [(policy, kind, cap, seed, w) for w in range(workers)])
    startup = 0.0
    try:
        for event in receive(events, processes):
            if event is None or event[0] != "report":
                continue
            startup = event[2] - launched
            found = [c.first_seen for c in event[3].counterexamples if c.kind == kind]
            if found:
                return startup + found[0], startup
    finally:
        stop_workers(processes)
    return None, startup


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--examples", type=int, default=60)
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--cap", type=float, default=60.0)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    speed, alone = [], {}  # alone: the seconds one worker by itself takes over a seed stream's examples

    def seconds_alone(stream: int) -> float:
        if stream not in alone:
            alone[stream] = throughput(1, args.examples, stream)["seconds"]
        return alone[stream]

    for seed in range(args.seeds):
        for n in args.workers:
            row = throughput(n, args.examples, seed)
            # the same work done one stream at a time, each by one worker alone
            row["speedup"] = round(sum(seconds_alone(stream_seed(seed, w)) for w in range(n)) / row["seconds"], 2)
            speed.append(row)
    speedups = {n: statistics.median(r["speedup"] for r in speed if r["workers"] == n) for n in args.workers}
    ceilings = {n: ceiling(n) for n in args.workers}
    first = []
    for policy, kind in KNOWN_BAD.items():
        for n in args.workers:
            runs = [first_counterexample(policy, kind, n, args.cap, seed) for seed in range(args.seeds)]
            found = [t for t, _ in runs if t is not None]
            first.append({"policy": policy, "kind": kind, "workers": n,
                          "seconds": [None if t is None else round(t, 2) for t, _ in runs],
                          "median": round(statistics.median(found), 2) if len(found) == len(runs) else None,
                          "startup": round(statistics.median(s for _, s in runs), 2)})
    if args.json:
        print(json.dumps({"throughput": speed, "median_speedup": speedups, "machine_ceiling": ceilings,
                          "first_counterexample": first}, indent=2))
        return 0
    print(f"throughput ({THROUGHPUT_POLICY}, {args.examples} examples per worker)")
    for row in speed:
        print(f"  seed {row['seed']} {row['workers']} workers: {row['examples']:>6} examples {row['steps']:>8} steps "
              f"in {row['seconds']:>6.1f} s  {row['steps_per_second']:>8.1f} steps/s  x{row['speedup']}")
    print("  median speed-up: " + ", ".join(f"{n} workers x{x:.2f}" for n, x in speedups.items()))
    print("  the machine's own (pure arithmetic): " + ", ".join(f"{n} processes x{x:.2f}" for n, x in ceilings.items()))
    print(f"first counterexample (median of {args.seeds} seeds, cap {args.cap:g} s, process start included)")
    for row in first:
        median = "not found" if row["median"] is None else f"{row['median']:.2f} s"
        print(f"  {row['policy']:<30} {row['kind']:<15} {row['workers']} workers: {median:>10}  "
              f"runs {row['seconds']}  startup {row['startup']:.2f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
