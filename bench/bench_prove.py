"""Benchmark: how the prover scales with the number of symbolic requests N.

Run after ``pip install -e .``::

    python bench/bench_prove.py [--sizes 4 8 16 32] [--policy P ...] [--timeout S] [--json]

For each N it proves every obligation of each policy (sequentially, one process, as the
manifest is recorded) and prints the seconds of each (policy, obligation) with its
verdict, then the total per N. Induction does not depend on N (it is unbounded), and a
counterexample is found at the smallest size that has one, so most verdicts cost the
same at every N. The unrolled pass itself is what grows: the "bounded pass" lines time
the one-pass query from an arbitrary state of N requests (``bounded_pass.holds_up_to``) for
BOUNDED_OBLIGATIONS of every policy whose loop the pass skeleton models (SGLang's is decided
by a bounded trace search instead), whatever induction concludes, which is what an
obligation costs where induction does not apply and the small search finds nothing. A
query that runs past ``--timeout`` raises Unknown: the point where it stops scaling.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any

from tokenbudget.model import builtin_policies, get_policy
from tokenbudget.proofs.bounded_pass import holds_up_to
from tokenbudget.proofs.loop_search import skeleton_models
from tokenbudget.proofs.obligations import Options
from tokenbudget.proofs.prove import prove
from tokenbudget.proofs.solving import Unknown
from tokenbudget.proofs.verdicts import PROVED_UP_TO
from tokenbudget.proofs.violations import VIOLATED

BOUNDED_OBLIGATIONS = ("input-budget-nonnegative", "input-rows-cap", "spec-shape")


def bounded_pass(policy: str, obligation: str, n: int, timeout_s: float) -> tuple[str, float]:
    """(holds | broken | unknown, seconds) of one pass from any state of at most n requests."""
    start = time.perf_counter()
    try:
        held = holds_up_to(get_policy(policy), lambda st: VIOLATED[obligation](st.config, st.result), n, timeout_s,
                           f"{obligation} of {policy}", assume_seq_cap=True)
        verdict = "holds" if held else "broken"
    except Unknown:
        verdict = "unknown"
    return verdict, time.perf_counter() - start


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[4, 8, 16, 32], help="values of N (--max-requests)")
    parser.add_argument("--policy", action="append", dest="policies", default=[], help="default: every built-in")
    parser.add_argument("--timeout", type=float, default=Options.timeout_s, help="seconds per z3 query")
    parser.add_argument("--json", action="store_true", help="print one JSON document")
    args = parser.parse_args(argv)
    policies = args.policies or list(builtin_policies())
    runs: list[dict[str, Any]] = []
    for n in args.sizes:
        start = time.perf_counter()
        outcomes = prove(policies, Options(max_requests=n, timeout_s=args.timeout), jobs=1)
        total = time.perf_counter() - start
        rows = [{"policy": o.policy, "obligation": o.obligation, "method": o.method, "seconds": round(o.seconds, 3),
                 "verdict": o.label if o.verdict == PROVED_UP_TO else o.verdict} for o in outcomes]
        bounded = []
        for policy in [name for name in policies if skeleton_models(get_policy(name))]:
            for obligation in BOUNDED_OBLIGATIONS:
                verdict, seconds = bounded_pass(policy, obligation, n, args.timeout)
                bounded.append({"policy": policy, "obligation": obligation, "verdict": verdict,
                                "seconds": round(seconds, 3)})
        runs.append({"max_requests": n, "seconds": round(total, 2), "outcomes": rows, "bounded_pass": bounded})
        if not args.json:
            print(f"N = {n}: {total:.1f} s in all", flush=True)
            for r in rows:
                if r["method"] != "induction":  # induction is N-independent; shown once below
                    print(f"  {r['policy']:<30} {r['obligation']:<30} {r['seconds']:7.2f} s  {r['verdict']}", flush=True)
            for b in bounded:
                print(f"  bounded pass  {b['policy']:<30} {b['obligation']:<26} {b['seconds']:7.2f} s  {b['verdict']}",
                      flush=True)
    if args.json:
        json.dump({"runs": runs}, sys.stdout, indent=1)
        print()
    else:
        induction = {(r["policy"]): r["seconds"] for r in runs[0]["outcomes"] if r["method"] == "induction"}
        print("induction (any N): " + ", ".join(f"{p} {s:.2f} s" for p, s in induction.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
