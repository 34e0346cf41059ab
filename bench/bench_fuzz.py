"""Benchmark: fuzzing throughput and the time to the first counterexample.

Run after ``pip install -e .``::

    python bench/bench_fuzz.py [--seeds 5] [--examples 200] [--cap 60] [--json]

Throughput: for each built-in policy, the reference model's scheduler steps per second
inside Hypothesis (``--examples`` examples, generation only), everything included:
Hypothesis, the state machine, the model and the spec's checks. A run does not stop at
a failure: every failure kind is treated as known, so a failing example just ends.

Time to the first counterexample: for each policy and each invariant it is known to
break (``tokenbudget.verdict.recorded_violations``, or by a finding about its engine's loop,
``model.findings``; among those the fuzzer judges), the seconds
until the fuzzer first sees that invariant violated (before shrinking), counting from
the start of the session; the other kinds are treated as known, so they do not stop the
search. Batches of 100 examples with seeds derived from each of ``--seeds`` seeds run
until it is found or ``--cap`` seconds pass. The median over the seeds is reported; the
goal is under GOAL seconds for every pair.

Exit status 0 when every median meets the goal, 1 otherwise.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from dataclasses import asdict, dataclass
from typing import Any

from hypothesis import Phase

from tokenbudget.check import JUDGED
from tokenbudget.verdict import recorded_violations
from tokenbudget.fuzz.failures import FAILURE_CLASSES
from tokenbudget.fuzz.machine import FuzzStats, machine_class
from tokenbudget.fuzz.session import run_machine
from tokenbudget.model import builtin_policies, get_policy
from tokenbudget.model.findings import findings_of

GOAL = 10.0
BATCH = 100
GENERATE = (Phase.explicit, Phase.generate)
ALL_KINDS = frozenset(FAILURE_CLASSES)


def throughput(policy: str, examples: int, seed: int) -> dict[str, Any]:
    """Steps per second of one run of ``examples`` examples that never stops at a failure."""
    cls = machine_class(policy, get_policy(policy))
    cls.stats = FuzzStats()
    cls.known = ALL_KINDS
    started = time.perf_counter()
    run_machine(cls, examples, seed, GENERATE)
    seconds = time.perf_counter() - started
    return {"policy": policy, "examples": cls.stats.examples, "steps": cls.stats.steps, "seconds": round(seconds, 2),
            "steps_per_second": round(cls.stats.steps / seconds, 1)}


def time_to_first(policy: str, kind: str, seed: int, cap: float) -> float | None:
    """Seconds until ``kind`` is first seen, or None when not within ``cap`` seconds."""
    started = time.perf_counter()
    batch = 0
    while time.perf_counter() - started < cap:
        cls = machine_class(policy, get_policy(policy))
        cls.stats = FuzzStats(started=started)
        cls.known = ALL_KINDS - {kind}
        found = run_machine(cls, BATCH, seed * 100_003 + batch, GENERATE)
        if found is not None:
            return cls.stats.first_failure[kind]
        batch += 1
    return None


@dataclass(frozen=True)
class FirstCounterexample:
    """Seconds to the first sight of ``invariant`` per seed (None: not within the cap), and
    their median, None unless more than half of the seeds found it."""

    policy: str
    invariant: str
    seconds: list[float | None]
    median: float | None


def first_counterexample(policy: str, kind: str, seeds: int, cap: float) -> FirstCounterexample:
    times = [time_to_first(policy, kind, seed, cap) for seed in range(seeds)]
    found = [t for t in times if t is not None]
    median = round(statistics.median(found), 2) if len(found) > len(times) // 2 else None
    return FirstCounterexample(policy, kind, [None if t is None else round(t, 2) for t in times], median)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, default=5, help="seeds per (policy, invariant) pair (default 5)")
    parser.add_argument("--examples", type=int, default=200, help="examples per throughput run (default 200)")
    parser.add_argument("--cap", type=float, default=60.0, help="seconds before a search gives up (default 60)")
    parser.add_argument("--json", action="store_true", help="print one JSON document")
    args = parser.parse_args(argv)
    policies = list(builtin_policies())
    speeds = [throughput(p, args.examples, seed=0) for p in policies]
    pairs = [(p, kind) for p in policies for kind in JUDGED if kind in recorded_violations(p)
             or any(f.invariant == kind for f in findings_of(get_policy(p).engine))]
    firsts = [first_counterexample(policy, kind, args.seeds, args.cap) for policy, kind in pairs]
    ok = all(f.median is not None and f.median < GOAL for f in firsts)
    if args.json:
        print(json.dumps({"ok": ok, "goal_seconds": GOAL, "throughput": speeds,
                          "time_to_first": [asdict(f) for f in firsts]}, indent=2))
    else:
        print("throughput (scheduler steps per second inside Hypothesis, checks included)")
        for s in speeds:
            print(f"  {s['policy']:30} {s['steps_per_second']:8.0f} steps/s  ({s['steps']} steps, "
                  f"{s['examples']} examples, {s['seconds']} s)")
        print(f"time to the first counterexample (median of {args.seeds} seeds; goal < {GOAL:g} s)")
        for f in firsts:
            median = ">cap" if f.median is None else f"{f.median:.2f} s"
            runs = " ".join("-" if t is None else f"{t:.2f}" for t in f.seconds)
            print(f"  {f.policy:30} {f.invariant:16} {median:>9}   ({runs})")
        print(f"verdict: {'ok' if ok else 'FAIL'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
