"""Benchmark: time to the first violation ``tokenbudget fuzz`` alone finds in each real bug.

Run from the repository root (after ``pip install -e .``)::

    python bench/bench_fuzz_real_bugs.py [--seconds 60] [--seeds 0 1 2 3 4] [--only MODULE ...] [--json]

For every real bug of tests/quality/real_bugs/ (the invariants ``test_real_bugs.BUGS`` names) and
the README's newcomer policy (``examples/waiting_drafts_free.py``, input-rows-cap, within
NEWCOMER_SECONDS), each seed runs the session ``fuzz --policy SPEC --seed S --workers 1
--seconds 60 --database none`` runs, in a process of its own, until it first sees one of those
invariants (not one a finding about the policy's loop explains, ``progress@F2``: the loop's own,
there without the bug); it prints the seconds to that first sight (``-``: not within the time) as a table and
exits 0 only when each bug is found on every seed (the newcomer's within NEWCOMER_SECONDS).
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
QUALITY = ROOT / "tests" / "quality"
NEWCOMER = ("waiting_drafts_free:WaitingDraftsFree", ("input-rows-cap", "input-budget-nonnegative"))
NEWCOMER_SECONDS = 10.0
CHILD = """
import json, sys, time
from tokenbudget.fuzz.session import fuzz
from tokenbudget.model.findings import FINDINGS
spec, seconds, seed, kinds = sys.argv[1], float(sys.argv[2]), int(sys.argv[3]), frozenset(sys.argv[4].split(","))
began, first = time.perf_counter(), []

def the_bugs(identities):  # a violation a finding about the loop explains (invariant@F<n>) is the loop's own
    return {kind for kind, _, how in (i.partition("@") for i in identities) if kind in kinds and how not in FINDINGS}

def stop_at_first(tally):
    if not first and the_bugs(tally.violations):
        first.append(time.perf_counter() - began)  # to the progress tick (0.2 s) that heard of it
        raise KeyboardInterrupt  # the session ends as on Ctrl-C

try:
    report = fuzz(spec, seconds=seconds, seed=seed, max_work_gap=0, tally=stop_at_first)
    first += [c.first_seen for c in report.counterexamples if the_bugs([c.key])]
except KeyboardInterrupt:
    pass
print(json.dumps({"first": min(first) if first else None}))
"""


def bugs() -> list[tuple[str, tuple[str, ...]]]:
    """(spec, the invariants that show it) for every real bug, then the newcomer's policy."""
    sys.path.insert(0, str(QUALITY))
    from test_real_bugs import BUGS  # the table of the real bugs and what each breaks

    return [(b.spec, b.invariants) for b in BUGS] + [NEWCOMER]


def first_sight(spec: str, kinds: tuple[str, ...], seconds: float, seed: int) -> float | None:
    """Seconds into a fresh session (seed ``seed``) to its first sight of one of ``kinds``; None: not seen."""
    path = os.pathsep.join([str(QUALITY), str(ROOT / "examples"), os.environ.get("PYTHONPATH", "")])
    done = subprocess.run([sys.executable, "-c", CHILD, spec, str(seconds), str(seed), ",".join(kinds)],
                          env={**os.environ, "PYTHONPATH": path}, capture_output=True, text=True, cwd=ROOT)
    if done.returncode != 0:
        raise SystemExit(f"{spec} seed {seed}: the session failed: {done.stderr.strip()[-400:]}")
    first = json.loads(done.stdout.strip().splitlines()[-1])["first"]
    return None if first is None else round(first, 1)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    parser.add_argument("--only", nargs="+", default=None, metavar="MODULE")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    rows, missed = {}, []
    for spec, kinds in bugs():
        if args.only is not None and not any(o in spec for o in args.only):
            continue
        limit = NEWCOMER_SECONDS if (spec, kinds) == NEWCOMER else args.seconds
        rows[spec] = [first_sight(spec, kinds, limit, seed) for seed in args.seeds]
        missed += [f"{spec} seed {s}" for s, t in zip(args.seeds, rows[spec]) if t is None]
        if not args.json:
            cells = "".join(f"{'-' if t is None else t:>8}" for t in rows[spec])
            print(f"{spec:<50}{cells}", flush=True)
    if args.json:
        print(json.dumps({"seconds": args.seconds, "seeds": args.seeds, "first_sight": rows, "missed": missed}))
    elif missed:
        print("not found: " + ", ".join(missed))
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
