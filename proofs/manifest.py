"""The verdict manifest: the expected verdict of every built-in (policy, obligation).

``manifest.json`` beside this file records, for each pair, the verdict, the bound of a
bounded proof, the method, the seconds it took and z3's version, as recorded by::

    python -m tokenbudget.proofs.manifest --update    # prove everything and rewrite it
    python -m tokenbudget.proofs.manifest              # prove everything and compare

``problem`` is what ``tokenbudget prove``, ``tokenbudget check`` and the test suite
judge by: a verdict that differs from the recorded one (a flip), an UNKNOWN, or a pair
the manifest lacks is a problem; with ``timing`` (the test suite, on the machine the
manifest is recorded for) so is a proof taking more than ``SLOWDOWN`` times its recorded
time, with ``GRACE_S`` of slack for sub-second proofs. A bounded proof matches a
recorded bounded proof whatever its N, so ``--max-requests`` does not flip verdicts.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from dataclasses import dataclass
from importlib import resources
from typing import Any, Mapping, Optional, Sequence

from .solving import Z3_VERSION
from .verdicts import UNKNOWN, Outcome

FORMAT = "tokenbudget.manifest/1"
SLOWDOWN = 3.0
GRACE_S = 1.0
PATH = os.path.join(os.path.dirname(__file__), "manifest.json")


@dataclass(frozen=True)
class Expected:
    verdict: str
    bound: Optional[int]
    method: str
    seconds: float


def load() -> dict[str, dict[str, Expected]]:
    """policy -> obligation -> what was recorded (empty when no manifest was recorded)."""
    source = resources.files(__package__).joinpath("manifest.json")
    if not source.is_file():
        return {}
    doc = json.loads(source.read_text("utf-8"))
    assert doc["format"] == FORMAT, f"{PATH}: format {doc['format']!r}, expected {FORMAT!r}"
    return {policy: {name: Expected(**entry) for name, entry in cells.items()}
            for policy, cells in doc["verdicts"].items()}


def expected_of(manifest: Mapping[str, Mapping[str, Expected]], outcome: Outcome) -> Optional[Expected]:
    return manifest.get(outcome.policy, {}).get(outcome.obligation)


def problem(outcome: Outcome, expected: Optional[Expected], timing: bool = False) -> Optional[str]:
    """Why ``outcome`` is not what the manifest expects, or None."""
    where = f"{outcome.policy} / {outcome.obligation}"
    if outcome.verdict == UNKNOWN:
        return f"{where}: unknown ({outcome.detail})"
    if expected is None:
        return f"{where}: {outcome.label}, but the manifest records no verdict (run the manifest --update)"
    if outcome.verdict != expected.verdict:
        recorded = f"proved up to {expected.bound}" if expected.bound is not None else expected.verdict
        return f"{where}: {outcome.label}, the manifest records {recorded}"
    limit = max(SLOWDOWN * expected.seconds, expected.seconds + GRACE_S)
    if timing and outcome.seconds > limit:
        return f"{where}: took {outcome.seconds:.2f}s, more than {SLOWDOWN:g}x the recorded {expected.seconds:.2f}s"
    return None


def compare(outcomes: Sequence[Outcome], timing: bool = False) -> list[str]:
    """Every problem of ``outcomes`` against the recorded manifest."""
    recorded = load()
    found = (problem(o, expected_of(recorded, o), timing) for o in outcomes)
    return [p for p in found if p is not None]


def dump(outcomes: Sequence[Outcome], max_requests: int) -> dict[str, Any]:
    verdicts: dict[str, dict[str, Any]] = {}
    for o in outcomes:
        verdicts.setdefault(o.policy, {})[o.obligation] = {
            "verdict": o.verdict, "bound": o.bound, "method": o.method, "seconds": round(o.seconds, 3)}
    return {"format": FORMAT, "z3": Z3_VERSION, "max_requests": max_requests, "verdicts": verdicts}


def main(argv: Optional[list[str]] = None) -> int:
    """Prove every built-in obligation; with --update record the verdicts, else compare."""
    from ..model import builtin_policies
    from .obligations import Options
    from .prove import prove

    parser = argparse.ArgumentParser(prog="python -m tokenbudget.proofs.manifest", description=main.__doc__)
    parser.add_argument("--update", action="store_true", help="rewrite manifest.json with the verdicts found")
    parser.add_argument("--jobs", type=int, default=1, help="worker processes (1 records undisturbed times)")
    args = parser.parse_args(argv)
    options = Options()
    outcomes = prove(list(builtin_policies()), options, jobs=args.jobs)
    unknown = [o for o in outcomes if o.verdict == UNKNOWN]
    if args.update:
        if unknown:
            print(f"not recorded: {len(unknown)} unknown verdict(s), e.g. {unknown[0].policy} / "
                  f"{unknown[0].obligation}: {unknown[0].detail}", file=sys.stderr)
            return 1
        with open(PATH, "w", encoding="utf-8") as f:
            json.dump(dump(outcomes, options.max_requests), f, indent=1, sort_keys=False)
            f.write("\n")
        print(f"recorded {len(outcomes)} verdicts in {PATH}")
        return 0
    problems = compare(outcomes, timing=True)
    for p in problems:
        print(p)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
