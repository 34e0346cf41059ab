"""Benchmark: reducing the counterexamples of a short deterministic fuzz.

Run after ``pip install -e .``::

    python bench/bench_reduce.py [--examples 50] [--seed 0] [--json]

For each built-in policy, the fuzz ``tokenbudget check`` runs (``--examples`` examples from
``--seed``, generation only, no Hypothesis shrinking) with no time limit on the reduction
(``fuzz.session.reduce``, ``spec.shrink``): the seconds the whole session took, and for
each counterexample its kind, the ops the machine applied and the ops left after reducing.
The counterexamples are deterministic for a seed, so two versions of the reducer compare
by size; their seconds include the fuzzing, which does not change between them.
"""
from __future__ import annotations

import argparse
import json
import time
from typing import Any

from hypothesis import Phase

from tokenbudget.fuzz.session import fuzz
from tokenbudget.model import builtin_policies


def reduce_policy(policy: str, examples: int, seed: int) -> dict[str, Any]:
    started = time.perf_counter()
    report = fuzz(policy, examples=examples, seed=seed, phases=(Phase.explicit, Phase.generate))
    return {"policy": policy, "seconds": round(time.perf_counter() - started, 2),
            "counterexamples": [{"kind": c.kind, "ops_found": c.ops_found, "ops_reduced": len(c.trace.ops)}
                                for c in report.counterexamples]}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--examples", type=int, default=50, help="examples per policy (default 50, as check)")
    parser.add_argument("--seed", type=int, default=0, help="the fuzz seed (default 0, as check)")
    parser.add_argument("--json", action="store_true", help="print one JSON document")
    args = parser.parse_args(argv)
    rows = [reduce_policy(p, args.examples, args.seed) for p in builtin_policies()]
    total = round(sum(r["seconds"] for r in rows), 1)
    if args.json:
        print(json.dumps({"examples": args.examples, "seed": args.seed, "seconds": total, "policies": rows}, indent=2))
        return 0
    for r in rows:
        found = ", ".join(f"{c['kind']} {c['ops_found']} -> {c['ops_reduced']} ops" for c in r["counterexamples"])
        print(f"{r['policy']:30} {r['seconds']:7.1f} s  {found or '-'}")
    print(f"total {total} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
