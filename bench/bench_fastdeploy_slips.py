"""Benchmark: does ``fuzz --target fastdeploy --engine-path`` catch one-line slips in FastDeploy's scheduler?

Run after ``pip install -e ".[fastdeploy]"`` from the repository root::

    python bench/bench_fastdeploy_slips.py [--engine DIR] [--seconds 60 | --examples N] [--seeds 0 1 2]
                                           [--workers N] [--only NAME ...] [--json]

``--engine`` defaults to $TOKENBUDGET_FASTDEPLOY_PATH (a FastDeploy 2a606e361 folder; .ci/run
sets it). For the unpatched engine and then each slip of tests/fastdeploy/fastdeploy_slips.py,
on each seed, it copies the engine to a temp dir, plants the slip, runs ``tokenbudget fuzz
--target fastdeploy --engine-path DIR --seconds S --seed N --database none --json`` in a
process of its own and prints one row per slip and seed: the seconds to the first violation
whose verdict is not known and to the first ``conformance`` violation (seconds into the session,
before shrinking), the wall time, the examples run, and every counterexample's identity with its
verdict. Then the table: per slip, the seconds to the first conformance violation on each seed,
what counts as a catch (the unpatched engine has own findings of its own, SPEC.md §6: a slip is
told apart by the parting). The unpatched engine must show no conformance violation.
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

TESTS = Path(__file__).resolve().parents[1] / "tests" / "fastdeploy"


def fuzz_once(engine: Path, seconds: float, seed: int, workers: int, examples: int | None) -> dict[str, object]:
    budget = ["--examples", str(examples)] if examples else ["--seconds", f"{seconds:g}"]
    argv = [sys.executable, "-m", "tokenbudget.cli", "fuzz", "--target", "fastdeploy", "--engine-path", str(engine),
            *budget, "--seed", str(seed), "--workers", str(workers), "--database", "none", "--json"]
    started = time.perf_counter()
    done = subprocess.run(argv, capture_output=True, text=True)
    wall = time.perf_counter() - started
    try:
        doc = json.loads(done.stdout)
    except json.JSONDecodeError:
        said = [ln for ln in (done.stderr or done.stdout).strip().splitlines() if not ln.startswith("tokenbudget: ")]
        return {"wall": round(wall, 1), "error": f"exit {done.returncode}, no report: " + " | ".join(said[-12:])}
    policy = doc["policies"][0]
    found = [{"identity": key, "verdict": policy["judged"][key], "first_seen": v["first_seen_seconds"],
              "message": v["message"]} for key, v in policy["violations"].items()]
    own = [f["first_seen"] for f in found if f["verdict"] != "known"]
    conformance = [f["first_seen"] for f in found if f["identity"].startswith("conformance")]
    return {"wall": round(wall, 1), "examples": policy["examples"], "steps": policy["steps"], "found": found,
            "caught": bool(own), "seconds_to_catch": min(own) if own else None,
            "seconds_to_conformance": min(conformance) if conformance else None}


def line(result: dict) -> str:
    """One run's row: the slip and seed, the times to a catch, wall time, examples, what was found."""
    found = ", ".join(f"{f['identity']} ({f['verdict']}, {f['first_seen']:.1f} s)"
                      for f in result.get("found", ())) or result.get("error") or "-"
    conformance = result.get("seconds_to_conformance")
    to_conformance = "-" if conformance is None else f"{conformance:.1f} s"
    own = f"own in {result['seconds_to_catch']:.1f} s" if result.get("caught") else "no own"
    return (f"{result['slip']:34} seed {result['seed']}  {own:14} conformance {to_conformance:8} "
            f"wall {result['wall']:5.1f} s  {result.get('examples', 0)} examples  {found}")


def table(rows: list[dict], seeds: list[int]) -> str:
    """Per slip, the seconds to the first conformance violation on each seed ('-': none)."""
    out = [f"{'slip':34} " + "  ".join(f"seed {s:<3}" for s in seeds)]
    for name in dict.fromkeys(r["slip"] for r in rows):
        cells = []
        for seed in seeds:
            r = next((r for r in rows if r["slip"] == name and r["seed"] == seed), None)
            seconds = None if r is None else r.get("seconds_to_conformance")
            cells.append(f"{'-' if seconds is None else f'{seconds:.1f}':8}")
        out.append(f"{name:34} " + "  ".join(cells))
    return "\n".join(out)


def main() -> int:
    sys.path[:0] = [str(TESTS), str(TESTS.parent)]  # the slips and tests/planted_line.py
    from fastdeploy_slips import SLIPS, plant

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--engine", type=Path, default=os.environ.get("TOKENBUDGET_FASTDEPLOY_PATH"))
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--examples", type=int, default=None, help="fuzz --examples N instead of --seconds")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--workers", type=int, default=1, help="fuzz --workers (default 1)")
    parser.add_argument("--only", nargs="*", default=None, help="slip names ('none': the unpatched engine)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    if args.engine is None or not (args.engine / "fastdeploy" / "engine" / "sched").is_dir():
        parser.error("give --engine DIR (a FastDeploy 2a606e361 folder) or set TOKENBUDGET_FASTDEPLOY_PATH")
    wanted = [None, *SLIPS]
    if args.only is not None:
        wanted = [s for s in wanted if (s.name if s else "none") in args.only]
    rows = []
    for slip in wanted:
        for seed in args.seeds:
            with tempfile.TemporaryDirectory(prefix="tokenbudget-slip-") as tmp:
                result = fuzz_once(plant(args.engine.resolve(), slip, Path(tmp)), args.seconds, seed, args.workers,
                                   args.examples)
            result.update(slip=slip.name if slip else "none", seed=seed)
            rows.append(result)
            print(line(result), file=sys.stderr if args.json else sys.stdout, flush=True)
    if args.json:
        print(json.dumps(rows, indent=1))
        return 0
    print(table(rows, args.seeds))
    slips = [r for r in rows if r["slip"] != "none"]
    caught = sum(r.get("seconds_to_conformance") is not None for r in slips)
    budget = f"{args.examples} examples" if args.examples else f"{args.seconds:g} s"
    print(f"a conformance violation in {caught} of {len(slips)} runs ({budget} each, seeds "
          f"{', '.join(map(str, args.seeds))})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
