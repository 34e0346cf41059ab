"""Verdicts: what the prover concluded about one (policy, obligation) pair."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional

from ..spec.trace import Trace, dump_trace

PROVED = "proved"  # for every config the policy accepts and any number of requests
PROVED_UP_TO = "proved up to N"  # for every state or trace with at most N requests
REFUTED = "refuted"  # with a minimal counterexample trace that replays
UNKNOWN = "unknown"  # z3 gave up or no method decided: a failure, never a pass
VERDICTS = (PROVED, PROVED_UP_TO, REFUTED, UNKNOWN)
# The method of a verdict from running the model over a bounded family of traces (``loop_search``):
# its PROVED_UP_TO covers that family only, not every state of N requests, and is labelled so.
MODEL_SEARCH = "model search"


@dataclass(frozen=True)
class Outcome:
    """The verdict on one obligation, how it was reached, and its counterexample traces.

    ``bound`` is N for PROVED_UP_TO; ``detail`` says in one line why (the inductive
    invariant, why induction did not apply, the counterexample's config, ...).
    """

    policy: str
    obligation: str
    verdict: str
    method: str  # induction | bounded | search | config | relational | MODEL_SEARCH
    seconds: float
    detail: str
    bound: Optional[int] = None
    traces: tuple[Trace, ...] = field(default=(), compare=False)
    gap: Optional[int] = None  # work-conserving: the tokens its counterexample leaves unused

    def __post_init__(self) -> None:
        assert self.verdict in VERDICTS, self.verdict
        assert (self.verdict == PROVED_UP_TO) == (self.bound is not None), (self.verdict, self.bound)
        assert (self.verdict == REFUTED) == bool(self.traces), "a refutation comes with its traces, only it"

    @property
    def label(self) -> str:
        if self.verdict != PROVED_UP_TO:
            return self.verdict
        return f"searched up to {self.bound}" if self.method == MODEL_SEARCH else f"proved up to {self.bound}"

    def to_json(self) -> dict[str, Any]:
        return {"policy": self.policy, "obligation": self.obligation, "verdict": self.verdict, "bound": self.bound,
                "method": self.method, "seconds": round(self.seconds, 3), "detail": self.detail, "gap": self.gap,
                "traces": [dump_trace(t) for t in self.traces]}
