"""Benchmark: replay time and peak memory against trace length.

Run after ``pip install -e .``::

    python bench/bench_replay.py [--requests 5000 20000 40000] [--megabytes 50] [--at-once N ...] [--json]

Each workload is ``bench/long_trace.py``'s (N requests arriving over time, seeded); the
last one is a trace of about ``--megabytes`` MB (more accepted drafts per step op). Every
replay runs in a fresh process, as ``tokenbudget replay --json`` does it: load and
validate the file, run the model, judge the run, build the summary. Reported per trace:
file size, steps, seconds by phase and the process's peak resident memory. ``--at-once``
adds traces of N requests all queued before the first step (``long_trace.py --at-once``):
the cost of a long waiting queue.
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from long_trace import long_trace  # noqa: E402

from tokenbudget.spec.trace import write_trace  # noqa: E402

MB_PER_ACCEPTED = 11e-6  # MB that one more accepted entry per step op adds, per request of the trace


def replay_once(path: str) -> dict[str, float]:
    """Replay one trace in this process; the timings and the peak memory."""
    t0 = time.perf_counter()
    from tokenbudget.model.replay import replay_on_model
    from tokenbudget.spec.trace import load_trace

    trace = load_trace(path)
    t1 = time.perf_counter()
    result = replay_on_model(trace)
    t2 = time.perf_counter()
    json.dumps(result.to_json())
    t3 = time.perf_counter()
    return {"steps": len(result.steps), "ok": result.ok, "load_s": round(t1 - t0, 2), "replay_s": round(t2 - t1, 2),
            "json_s": round(t3 - t2, 2), "total_s": round(t3 - t0, 2),
            "peak_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)}


def measure(requests: int, accepted_per_step: int, folder: str, at_once: bool = False) -> dict[str, object]:
    path = os.path.join(folder, f"trace-{requests}-{accepted_per_step}-{'at-once' if at_once else 'over-time'}.json")
    write_trace(long_trace(requests, seed=0, accepted_per_step=accepted_per_step, at_once=at_once), path)
    proc = subprocess.run([sys.executable, __file__, "--one", path], capture_output=True, text=True, check=True)
    return {"requests": requests, "arrival": "at once" if at_once else "over time",
            "megabytes": round(os.path.getsize(path) / 1e6, 1), **json.loads(proc.stdout)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--requests", type=int, nargs="*", default=[5000, 20000, 40000])
    parser.add_argument("--megabytes", type=float, default=50.0, help="size of the last trace (0: none)")
    parser.add_argument("--at-once", type=int, nargs="*", default=[], metavar="N",
                        help="also traces of N requests queued before the first step")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--one", help=argparse.SUPPRESS)  # replay this file in this process
    args = parser.parse_args(argv)
    if args.one:
        print(json.dumps(replay_once(args.one)))
        return 0
    rows = []
    with tempfile.TemporaryDirectory(prefix="bench-replay-") as folder:
        for n in args.requests:
            rows.append(measure(n, 8, folder))
        if args.megabytes:
            requests = 20000
            per_step = max(8, round(args.megabytes / (requests * MB_PER_ACCEPTED)))
            rows.append(measure(requests, per_step, folder))
        for n in args.at_once:
            rows.append(measure(n, 0, folder, at_once=True))
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    print(f"{'requests':>8} {'arrival':>9} {'MB':>6} {'steps':>6} {'load_s':>7} {'replay_s':>8} {'json_s':>6} {'total_s':>7} "
          f"{'peak_MiB':>8}")
    for r in rows:
        print(f"{r['requests']:8d} {r['arrival']:>9} {r['megabytes']:6.1f} {r['steps']:6d} {r['load_s']:7.2f} {r['replay_s']:8.2f} "
              f"{r['json_s']:6.2f} {r['total_s']:7.2f} {r['peak_mib']:8d}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
