"""How much fuzzing an ok needs: below its floor a run's verdict is "no evidence", never ok.

A fuzz run (``fuzz``, ``campaign``, ``check``'s fuzz section) whose verdicts fail nothing
is ok only when it ran at least its target's FLOOR of examples and steps (all workers
together). A real engine's floor is higher: its first examples are where a start-up that
ate the budget shows. A run that asked for fewer examples than the floor needs only those.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from .targets import FASTDEPLOY, MODEL, SGLANG, VLLM

NO_EVIDENCE = "no evidence"


@dataclass(frozen=True)
class Floor:
    """The least a run must have done for its ok to count."""

    examples: int
    steps: int


REAL_ENGINE = Floor(examples=3, steps=10)
FLOORS = {MODEL: Floor(examples=1, steps=1), VLLM: REAL_ENGINE, SGLANG: REAL_ENGINE, FASTDEPLOY: REAL_ENGINE}


def floor_of(target: str, examples_asked: Optional[int] = None) -> Floor:
    """The floor of a run on ``target`` (a real engine's for one not in FLOORS) that asked
    for ``examples_asked`` examples (None: a budget in seconds)."""
    floor = FLOORS.get(target, REAL_ENGINE)
    if examples_asked is None:
        return floor
    return Floor(max(1, min(floor.examples, examples_asked)), floor.steps)


def shortfall(examples: int, steps: int, floor: Floor) -> Optional[str]:
    """Why a run of ``examples`` and ``steps`` is no evidence (one line), or None when it meets ``floor``."""
    if examples >= floor.examples and steps >= floor.steps:
        return None
    return (f"{examples} example{'s' * (examples != 1)} and {steps} step{'s' * (steps != 1)} ran, under the "
            f"floor of {floor.examples} example{'s' * (floor.examples != 1)} and {floor.steps} "
            f"step{'s' * (floor.steps != 1)}")
