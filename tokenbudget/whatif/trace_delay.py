"""A trace on the virtual clock: its ops applied in order under a policy, each step charged
what the cost model says; when each request was added, got its first token, finished."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from ..model import BudgetConfig, BudgetPolicy
from ..model.target import ModelTarget
from ..spec.trace import AbortOp, AddOp, StepOp, Trace
from .simulator import CostModel
from .step_shape import StepShape


@dataclass
class RequestDelay:
    """One request of a trace: added at ``added_s``; None where it never got there."""

    added_s: float
    first_token_s: Optional[float] = None
    finish_s: Optional[float] = None

    @property
    def ttft_s(self) -> Optional[float]:
        return None if self.first_token_s is None else self.first_token_s - self.added_s


@dataclass
class TraceTiming:
    """A trace's requests on the clock; ``error`` is the failure that ended it early, if any."""

    policy: str
    requests: dict[str, RequestDelay]
    seconds: float
    error: Optional[str] = None


def time_trace(trace: Trace, cfg: BudgetConfig, policy: BudgetPolicy, cost: CostModel) -> TraceTiming:
    """Apply ``trace``'s ops under ``policy`` (its accepted drafts as written); a step that
    fails ends the run with ``error`` set. Raises ConfigError when the policy refuses cfg."""
    target = ModelTarget(cfg, policy)
    requests: dict[str, RequestDelay] = {}
    now = 0.0
    for op in trace.ops:
        if isinstance(op, AddOp):
            target.add(op)
            requests[op.id] = RequestDelay(now)
        elif isinstance(op, AbortOp):
            target.abort(op.id)
        elif isinstance(op, StepOp):
            record, outcome = target.step(op.accepted)
            if record.error is not None:
                return TraceTiming(policy.name, requests, now, f"step {record.step}: {record.error}")
            now += cost.step_seconds(StepShape.of(record))
            for rid, state in outcome.requests.items():
                r = requests[rid]
                if r.first_token_s is None and state.num_output_tokens > 0:
                    r.first_token_s = now
                if r.finish_s is None and state.status in ("finished", "aborted"):
                    r.finish_s = now
    return TraceTiming(policy.name, requests, now)
