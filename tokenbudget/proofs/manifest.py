"""The verdict manifest: the expected verdict of every built-in (policy, obligation).

``manifest.json`` beside this file records, for each pair, the verdict, the bound of a
bounded proof, the method, the seconds it took and z3's version, as ``tokenbudget prove
--update-manifest`` wrote it (``dump``).

``problem`` is what ``tokenbudget prove``, ``tokenbudget check`` and the test suite
judge by: a verdict that differs from the recorded one (a flip), an UNKNOWN, or a pair
the manifest lacks is a problem. A bounded proof matches a recorded bounded proof
whatever its N, so ``--max-requests`` does not flip verdicts. The recorded seconds are
for reading beside the measured ones, never a verdict.
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass
from importlib import resources
from typing import Any, Mapping, Optional, Sequence

from .solving import Z3_VERSION
from .verdicts import UNKNOWN, Outcome

FORMAT = "tokenbudget.manifest/1"
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


def problem(outcome: Outcome, expected: Optional[Expected]) -> Optional[str]:
    """Why ``outcome`` is not what the manifest expects, or None."""
    where = f"{outcome.policy} / {outcome.obligation}"
    if outcome.verdict == UNKNOWN:
        return f"{where}: unknown ({outcome.detail})"
    if expected is None:
        return f"{where}: {outcome.label}, but the manifest records no verdict (run tokenbudget prove --update-manifest)"
    if outcome.verdict != expected.verdict:
        recorded = f"proved up to {expected.bound}" if expected.bound is not None else expected.verdict
        return f"{where}: {outcome.label}, the manifest records {recorded}"
    return None


def compare(outcomes: Sequence[Outcome]) -> list[str]:
    """Every problem of ``outcomes`` against the recorded manifest."""
    recorded = load()
    found = (problem(o, expected_of(recorded, o)) for o in outcomes)
    return [p for p in found if p is not None]


def dump(outcomes: Sequence[Outcome], max_requests: int, path: str) -> None:
    """Record ``outcomes`` (proved with ``max_requests``) as the manifest at ``path``."""
    assert not [o for o in outcomes if o.verdict == UNKNOWN], "an unknown verdict is never recorded"
    verdicts: dict[str, dict[str, Any]] = {}
    for o in outcomes:
        verdicts.setdefault(o.policy, {})[o.obligation] = {
            "verdict": o.verdict, "bound": o.bound, "method": o.method, "seconds": round(o.seconds, 3)}
    doc = {"format": FORMAT, "z3": Z3_VERSION, "max_requests": max_requests, "verdicts": verdicts}
    with open(path, "w", encoding="utf-8") as f:
        json.dump(doc, f, indent=1, sort_keys=False)
        f.write("\n")
