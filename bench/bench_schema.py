"""Benchmark: validating a long trace against the trace schema, and loading it whole.

    python bench/long_trace.py 20000 /tmp/t20k.json
    python bench/bench_schema.py /tmp/t20k.json [--repeat 3] [--stock]

Prints the best of ``--repeat`` runs of ``SCHEMA.accepts`` (the check every load makes) and of
``load_trace``. ``--stock`` also times jsonschema's own ``is_valid`` on the schema (once: it is
slow). Run it with PYTHONPATH at two trees to compare their validators on the same machine.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Callable


def best(repeat: int, run: Callable[[], object]) -> float:
    """The fewest seconds ``run`` took in ``repeat`` runs."""
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        run()
        times.append(time.perf_counter() - started)
    return min(times)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("trace")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--stock", action="store_true")
    args = parser.parse_args()
    from tokenbudget.spec.trace import SCHEMA, load_trace
    with open(args.trace, encoding="utf-8") as f:
        document = json.load(f)
    print(f"ops: {len(document['ops'])}")
    print(f"SCHEMA.accepts: {best(args.repeat, lambda: SCHEMA.accepts(document)):.2f} s")
    print(f"load_trace: {best(args.repeat, lambda: load_trace(args.trace)):.2f} s")
    if args.stock:
        import jsonschema
        validator = jsonschema.validators.validator_for(SCHEMA.root)(SCHEMA.root)
        print(f"jsonschema is_valid: {best(1, lambda: validator.is_valid(document)):.2f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
