"""Benchmark: do ``fuzz --seconds S`` and ``check --policy P`` keep their time budgets?

Run after ``pip install -e .``, with the folder of your policies on PYTHONPATH::

    python bench/bench_budgets.py [--policy P ...] [--seconds S] [--workers N ...] [--no-check] [--json]

For each policy (default: vllm-adaptive) it runs ``tokenbudget fuzz --policy P --seconds S``
in a process of its own, once per worker count, and prints the wall time against S + 10%;
then ``tokenbudget check --policy P`` with the seconds of each section (corpus, fuzz,
proofs) and the fuzz section's share, against 60 s. Every command runs in a temporary
current directory, which is checked to be empty afterwards; the example database and
Hypothesis's own files go to a temporary cache folder.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

CHECK_BUDGET = 60.0  # seconds, on 2 cores, for a policy like the built-ins
OVERRUN = 0.10  # fuzz --seconds S ends within S + 10%


def command(argv: list[str], cwd: Path, cache: Path) -> tuple[float, subprocess.CompletedProcess[str]]:
    env = {**os.environ, "XDG_CACHE_HOME": str(cache)}
    for name in ("TOKENBUDGET_DATABASE", "HYPOTHESIS_STORAGE_DIRECTORY"):
        env.pop(name, None)
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "tokenbudget.cli", *argv, "--quiet"], cwd=cwd, env=env,
                          capture_output=True, text=True)
    return time.perf_counter() - start, done


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--policy", action="append", default=[], help="a built-in name or pkg.module:Class")
    parser.add_argument("--seconds", type=float, default=10.0, help="fuzz --seconds (default 10)")
    parser.add_argument("--workers", type=int, action="append", default=[], help="fuzz --workers (default 1 and 2)")
    parser.add_argument("--no-check", action="store_true", help="time fuzz only")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as scratch:
        cwd, cache = Path(scratch) / "cwd", Path(scratch) / "cache"
        cwd.mkdir()
        for policy in args.policy or ["vllm-adaptive"]:
            for workers in args.workers or [1, 2]:
                corpus = Path(scratch) / f"corpus-{len(rows)}"
                wall, done = command(["fuzz", "--policy", policy, "--seconds", str(args.seconds), "--workers",
                                      str(workers), "--corpus", str(corpus), "--json"], cwd, cache)
                found = sorted(json.loads(done.stdout)["policies"][0]["violations"]) if done.stdout else []
                rows.append({"command": "fuzz", "policy": policy, "workers": workers, "budget": args.seconds,
                             "wall": round(wall, 1), "kept": wall <= args.seconds * (1 + OVERRUN),
                             "exit": done.returncode, "violations": found})
            if not args.no_check:
                wall, done = command(["check", "--policy", policy, "--json"], cwd, cache)
                seconds = json.loads(done.stdout).get("seconds", {}) if done.stdout else {}
                share = seconds.get("fuzz", 0.0) / wall if wall else 0.0
                rows.append({"command": "check", "policy": policy, "budget": CHECK_BUDGET, "wall": round(wall, 1),
                             "kept": wall <= CHECK_BUDGET, "exit": done.returncode, "sections": seconds,
                             "fuzz_share": round(share, 2)})
        left = sorted(p.name for p in cwd.iterdir())
    if args.json:
        print(json.dumps({"runs": rows, "left_in_cwd": left}, indent=2))
        return 0
    for r in rows:
        what = f"{r['command']:5}  {r['policy']}"
        if r["command"] == "fuzz":
            what += f"  --workers {r['workers']}"
        extra = (f"  sections {r['sections']}  fuzz share {r['fuzz_share']:.0%}" if r["command"] == "check"
                 else f"  violations {r['violations']}")
        print(f"{what}: {r['wall']:.1f} s of {r['budget']:g} s budget ({'kept' if r['kept'] else 'OVER'}), "
              f"exit {r['exit']}{extra}")
    print(f"left in the current directory: {left or 'nothing'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
