"""Finding minimal, replayable counterexamples in the family of short traces.

``search`` deepens over the family (``family.py``): one request and one step first,
then more requests and steps up to the bound, ``max_num_scheduled_tokens`` unset
before set, so the first family that can violate the obligation has the fewest
requests and steps. z3.Optimize then minimises B, S, k, the request count, the prompt
lengths and the other knobs (``Family.objectives``), and the model becomes a trace.
Every trace is replayed on the model before it is returned: one whose replay does not
meet its expectations (the grants of every step and the violation) is a prover bug and
raises ``ProverBug``.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Optional, Sequence

import z3

from ..model import BudgetPolicy
from ..model.intlike import BoolLike
from ..replay import ReplayResult, replay_on_model
from ..spec.trace import Trace
from .family import FAMILY_STEPS, Family
from .solving import Z3_VERSION, check, minimise, solver

FOUND_BY = f"tokenbudget prove (z3 {Z3_VERSION})"

# What a search looks for, given the families of one size (one per policy compared).
Goal = Callable[[Sequence[Family]], BoolLike]
# Extra judgement of a replay beyond its expectations (spec predicates a replay does not run).
Judge = Callable[[Sequence[ReplayResult]], Optional[str]]


class ProverBug(AssertionError):
    """A counterexample that does not replay as the prover said it would."""


@dataclass(frozen=True)
class Found:
    traces: tuple[Trace, ...]  # one per policy compared
    requests: int
    steps: int


def search(policies: Sequence[BudgetPolicy], goal: Goal, violation: Optional[str], what: str, max_requests: int,
           timeout_s: float, judge: Optional[Judge] = None, fixed: Optional[dict[str, Any]] = None,
           check_validation: bool = True, max_steps: int = FAMILY_STEPS) -> Optional[Found]:
    """The smallest trace of the family that meets ``goal``, replayed and verified; None when
    no trace of up to ``max_requests`` requests and ``max_steps`` steps does.

    ``violation`` names the invariant the replay must show (None: the goal is judged by
    ``judge`` only). Raises Unknown on a z3 timeout, ProverBug when a replay disagrees.
    """
    for size in range(2, max_requests + max_steps + 1):
        for steps in range(1, max_steps + 1):
            n = size - steps
            if not 1 <= n <= max_requests:
                continue
            for scheduled_set in (False, True):
                families = [Family(p, n, steps, scheduled_set, fixed=fixed, check_validation=check_validation)
                            for p in policies]
                constraints = [c for f in families for c in f.constraints]
                target = goal(families)
                if not check(solver(timeout_s, *constraints, target), f"{what} ({n} requests, {steps} steps)"):
                    continue
                model = minimise([*constraints, target], families[0].objectives(), timeout_s, f"minimising {what}")
                description = (f"{what}: the smallest counterexample tokenbudget prove found "
                               f"({n} request{'s' * (n != 1)}, {steps} step{'s' * (steps != 1)})")
                traces = tuple(f.trace(model, violation, description, FOUND_BY) for f in families)
                verify(traces, violation, judge)
                return Found(traces, n, steps)
    return None


def verify(traces: Sequence[Trace], violation: Optional[str], judge: Optional[Judge]) -> list[ReplayResult]:
    """Replay every trace on the model; ProverBug unless each meets its expectations (the
    grants of every step, the violation) and ``judge`` accepts them together."""
    results = [replay_on_model(t) for t in traces]
    for trace, result in zip(traces, results):
        if not result.ok:
            raise ProverBug(f"{trace.policy}: the counterexample does not replay: {'; '.join(result.problems)}")
        if violation is not None and violation not in {v.invariant for v in result.violations}:
            raise ProverBug(f"{trace.policy}: the counterexample replays without a {violation} violation")
    complaint = judge(results) if judge is not None else None
    if complaint is not None:
        raise ProverBug(f"the counterexample does not replay as found: {complaint}")
    return results
