"""Benchmark: does ``fuzz --target vllm --engine-path`` catch one-line slips in vLLM 0.33.0's (or 0.34.0's) scheduler?

Run after ``pip install -e .`` from the repository root::

    python bench/bench_vllm_slips.py [--engine DIR] [--seconds 60 | --examples N] [--seed 0] [--workers N]
                                     [--only NAME ...] [--json]

``--engine`` defaults to $TOKENBUDGET_VLLM033_PATH (.ci/run sets it). For the unpatched
engine and then each slip of tests/vllm/vllm_slips.py it copies the engine to a temp dir,
plants the slip, runs ``tokenbudget fuzz --target vllm --engine-path DIR --seconds S --seed N
--database none --json`` in a process of its own (no example database: what an earlier run
of the same slip saved would be replayed first, and the seed would no longer decide the run) and prints, per engine: caught or missed (caught: some counterexample's verdict is not known), the seconds to the first one that is
not known (seconds since the command started, before shrinking), the start-up (the command's
checks and its slowest worker's: vLLM imported, the first scheduler built), the command's wall time, the
examples run and how many took a same-step refund and an input-budget stop, and every
counterexample's identity with its verdict (one line per engine as it ends; on stderr
under --json, which prints the rows at the end). The unpatched engine must show known ones only.
A slip marked ``equivalent`` (it leaves the scheduler doing the same, SPEC.md §7) is reported
"equivalent (cannot be caught)" when nothing of its own is found, and counted neither caught
nor missed; a catch on it fails the argument and is reported so.
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

TESTS = Path(__file__).resolve().parents[1] / "tests" / "vllm"


def fuzz_once(engine: Path, seconds: float, seed: int, workers: int | None,
              examples: int | None = None) -> dict[str, object]:
    budget = ["--examples", str(examples)] if examples else ["--seconds", f"{seconds:g}"]
    argv = [sys.executable, "-m", "tokenbudget.cli", "fuzz", "--target", "vllm", "--engine-path", str(engine),
            *budget, "--seed", str(seed), "--database", "none", "--json"]
    if workers is not None:
        argv += ["--workers", str(workers)]
    started = time.perf_counter()
    done = subprocess.run(argv, capture_output=True, text=True)
    wall = time.perf_counter() - started
    try:
        doc = json.loads(done.stdout)
    except json.JSONDecodeError:
        return {"wall": wall, "error": (done.stderr or done.stdout).strip().splitlines()[-1:]}
    policy = doc["policies"][0]
    found = [{"identity": key, "verdict": policy["judged"][key], "first_seen": v["first_seen_seconds"],
              "message": v["message"]} for key, v in policy["violations"].items()]
    own = [f["first_seen"] for f in found if f["verdict"] != "known"]
    return {"wall": round(wall, 1), "startup": policy["startup_seconds"], "examples": policy["examples"],
            "steps": policy["steps"],
            "coverage": policy["coverage"], "coverage_examples": policy.get("coverage_examples", {}), "found": found, "caught": bool(own),
            "seconds_to_catch": min(own) if own else None}


def verdict(result: dict, unpatched: bool) -> str:
    """The unpatched engine must show known findings only; a slip is caught or missed; an
    equivalent slip (``Slip.equivalent``: the scheduler does the same) is reported as such,
    and a catch on it is a failure of the argument, not a catch."""
    caught = result.get("caught")
    if unpatched:
        return "FAIL: own" if caught else "ok: known only"
    if result.get("equivalent"):
        return "FAIL: equivalent caught" if caught else "equivalent (cannot be caught)"
    return f"caught in {result['seconds_to_catch']:.1f} s" if caught else "missed"


def startup(result: dict) -> str:
    """The command's start-up, to its slowest worker's first example: most of a first-seen time."""
    return f"start-up {result['startup']:4.1f} s" if "startup" in result else "start-up   -  "


def line(result: dict, unpatched: bool) -> str:
    """One engine's row: its verdict, the wall time, examples and what was found."""
    found = ", ".join(f"{f['identity']} ({f['verdict']}, {f['first_seen']:.1f} s)"
                      for f in result.get("found", ())) or result.get("error") or "-"
    cover = result.get("coverage_examples", {})
    return (f"{result['slip']:34} {verdict(result, unpatched):29} {startup(result)}  wall {result['wall']:5.1f} s  "
            f"{result.get('examples', 0)} examples "
            f"(refund in {cover.get('same-step-refund', 0)}, input stop in {cover.get('input-budget-stop', 0)})  "
            f"{found}")


def main() -> int:
    sys.path[:0] = [str(TESTS), str(TESTS.parent)]  # the slips and tests/planted_line.py
    from vllm_slips import SLIPS, plant

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--engine", type=Path, default=os.environ.get("TOKENBUDGET_VLLM033_PATH"))
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--workers", type=int, default=None, help="fuzz --workers (default: the command's)")
    parser.add_argument("--examples", type=int, default=None,
                        help="fuzz --examples N instead of --seconds: what a seed catches, whatever the machine's load")
    parser.add_argument("--only", nargs="*", default=None, help="slip names ('none': the unpatched engine)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    if args.engine is None or not (args.engine / "vllm" / "__init__.py").is_file():
        parser.error("give --engine DIR (a vLLM 0.33.0 or 0.34.0 folder) or set TOKENBUDGET_VLLM033_PATH")
    wanted = [None, *SLIPS]
    if args.only is not None:
        wanted = [s for s in wanted if (s.name if s else "none") in args.only]
    rows = []
    for slip in wanted:
        with tempfile.TemporaryDirectory(prefix="tokenbudget-slip-") as tmp:
            result = fuzz_once(plant(args.engine, slip, Path(tmp)), args.seconds, args.seed, args.workers,
                               args.examples)
        result["slip"] = slip.name if slip else "none"
        result["equivalent"] = bool(slip and slip.equivalent)
        rows.append(result)
        print(line(result, slip is None), file=sys.stderr if args.json else sys.stdout, flush=True)
    if args.json:
        print(json.dumps(rows, indent=1))
    slips = [r for r in rows if r["slip"] != "none" and not r["equivalent"]]
    caught = sum(bool(r.get("caught")) for r in slips)
    if not args.json:
        budget = f"{args.examples} examples" if args.examples else f"{args.seconds:g} s"
        equivalent = sum(r["equivalent"] for r in rows)
        print(f"caught {caught} of {len(slips)} slips ({budget} each, seed {args.seed})"
              + (f"; {equivalent} equivalent, not counted (SPEC.md §7)" if equivalent else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
