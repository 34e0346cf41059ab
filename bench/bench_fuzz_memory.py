"""Benchmark: the resident memory of a long ``fuzz --target sglang`` run, sampled.

    python bench/bench_fuzz_memory.py [--seconds 600] [--every 5] [--json]

Runs ``python -m tokenbudget.cli fuzz --target sglang --seconds N --workers 1`` and reads the
resident memory of it and its child processes (``/proc/PID/status`` VmRSS, summed) every
``--every`` seconds. Prints each sample, then over the samples after the first minute the
least, the most and the spread (most / least - 1), and each minute's least (the floor between
examples: what piles up) and most (the largest engine live then).
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

WARM_UP = 60.0  # seconds: imports and the first engines settle


def tree_rss(root: int) -> int:
    """The resident bytes of ``root`` and every process below it (0 for one gone meanwhile)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(entry.name))
    total, todo = 0, [root]
    while todo:
        pid = todo.pop()
        todo += children.get(pid, [])
        try:
            for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1]) * 1024
        except OSError:
            continue
    return total


def per_minute(samples: list[tuple[float, int]]) -> list[tuple[int, int]]:
    """Each whole minute's least and most resident MiB."""
    minutes: dict[int, list[int]] = {}
    for at, rss in samples:
        minutes.setdefault(int(at // 60), []).append(rss // 2**20)
    return [(min(m), max(m)) for _, m in sorted(minutes.items())]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=int, default=600)
    parser.add_argument("--every", type=float, default=5.0)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    command = [sys.executable, "-m", "tokenbudget.cli", "fuzz", "--target", "sglang",
               "--seconds", str(args.seconds), "--workers", "1"]
    started = time.monotonic()
    proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=os.environ.copy())
    samples: list[tuple[float, int]] = []
    while proc.poll() is None:
        samples.append((time.monotonic() - started, tree_rss(proc.pid)))
        if not args.json:
            print(f"{samples[-1][0]:7.1f} s  {samples[-1][1] / 2**20:8.1f} MiB", flush=True)
        time.sleep(args.every)
    later = [rss for at, rss in samples if at >= WARM_UP and rss > 0]
    result = {"command": " ".join(command[1:]), "exit": proc.returncode, "samples": len(samples),
              "least_mib": min(later) / 2**20 if later else None, "most_mib": max(later) / 2**20 if later else None,
              "spread": max(later) / min(later) - 1 if later else None,
              "per_minute_least_most_mib": per_minute(samples)}
    print(json.dumps(result) if args.json else "\n".join(f"{k}: {v}" for k, v in result.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
