"""Benchmark: does ``fuzz --target trtllm --engine-path`` catch one-line slips in TensorRT-LLM's scheduler.py?

Run from the repository root (``pip install -e .``)::

    python bench/bench_trtllm_slips.py [--engine DIR] [--seconds 60 | --examples N] [--seed 0 ...] [--json]

``--engine`` defaults to $TOKENBUDGET_TRTLLM_PATH, else .engines/tensorrt-llm-002f3cc3. For the unpatched
file and then each slip of tests/trtllm/trtllm_slips.py, per seed, it plants the slip in a copy, runs
``tokenbudget fuzz --target trtllm --engine-path DIR --seconds S --seed N --workers 1 --database none
--json`` in a process of its own and prints one row: the failures found (identity, verdict, seconds into
the session when first seen) and, for a slip, caught (some failure whose identity the unpatched file
showed on none of the seeds) with the seconds to the first such one, or missed. The unpatched file's
failures are the findings of SPEC.md §9 (T1-T3), which fuzz reports as the engine's own; under a time
budget the examples differ from run to run, so an identity the unpatched runs happened to miss can
pass for a catch (an equivalent slip caught says so).
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

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "tests" / "trtllm"), str(ROOT / "tests")]  # the slips and tests/planted_line.py
from trtllm_slips import SLIPS, plant  # noqa: E402


def fuzz_once(engine: Path, seed: int, seconds: float | None, examples: int | None) -> dict[str, object]:
    budget = ["--examples", str(examples)] if examples else ["--seconds", f"{seconds:g}"]
    argv = [sys.executable, "-m", "tokenbudget.cli", "fuzz", "--target", "trtllm", "--engine-path", str(engine),
            *budget, "--seed", str(seed), "--workers", "1", "--database", "none", "--json"]
    started = time.perf_counter()
    done = subprocess.run(argv, capture_output=True, text=True)
    wall = time.perf_counter() - started
    try:
        policy = json.loads(done.stdout)["policies"][0]
    except (json.JSONDecodeError, KeyError, IndexError):
        return {"wall": round(wall, 1), "error": (done.stderr or done.stdout).strip().splitlines()[-1:], "found": {}}
    found = {key: {"verdict": policy["judged"][key], "first_seen": v["first_seen_seconds"]}
             for key, v in policy["violations"].items()}
    return {"wall": round(wall, 1), "examples": policy["examples"], "steps": policy["steps"], "found": found}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    default = os.environ.get("TOKENBUDGET_TRTLLM_PATH") or str(ROOT / ".engines" / "tensorrt-llm-002f3cc3")
    parser.add_argument("--engine", type=Path, default=Path(default))
    budget = parser.add_mutually_exclusive_group()
    budget.add_argument("--seconds", type=float, default=60.0)
    budget.add_argument("--examples", type=int)
    parser.add_argument("--seed", type=int, nargs="+", default=[0])
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    rows = []
    out = sys.stderr if args.json else sys.stdout
    baseline: set[str] = set()  # what the unpatched file shows on any seed: the findings, not a slip
    for seed in args.seed:
        base = fuzz_once(args.engine, seed, args.seconds, args.examples)
        baseline |= set(base["found"])
        rows.append({"slip": "unpatched", "seed": seed, **base})
        print(f"seed {seed} unpatched {' ' * 51}wall {base['wall']:6.1f} s {base.get('examples', 0)} examples  "
              f"{sorted(base['found'])}", file=out, flush=True)
    with tempfile.TemporaryDirectory(prefix="tokenbudget-trtllm-slips-") as tmp:
        for seed in args.seed:
            for slip in SLIPS:
                engine = plant(args.engine, slip, Path(tmp) / f"{slip.name}-{seed}")
                result = fuzz_once(engine, seed, args.seconds, args.examples)
                own = {key: v["first_seen"] for key, v in result["found"].items() if key not in baseline}
                result.update(slip=slip.name, seed=seed, equivalent=bool(slip.equivalent), caught=bool(own),
                              seconds_to_catch=min(own.values()) if own else None, own=sorted(own))
                rows.append(result)
                what = (f"caught in {min(own.values()):.1f} s" if own else
                        "equivalent (cannot be caught)" if slip.equivalent else "missed")
                if own and slip.equivalent:
                    what = "FAIL: equivalent caught"
                print(f"seed {seed} {slip.name:30} {what:30} wall {result['wall']:6.1f} s "
                      f"{result.get('examples', 0)} examples  own {sorted(own)}", file=out, flush=True)
    if args.json:
        print(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
