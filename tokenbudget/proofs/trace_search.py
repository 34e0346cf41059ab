"""Finding minimal, replayable counterexamples in the family of short traces.

``search`` deepens over the family (``family.py``): one request and one step first,
then more requests and steps up to the bound, ``max_num_scheduled_tokens`` unset
before set, so the first family that can violate the obligation has the fewest
requests and steps. ``solving.minimise`` then minimises B, S, k, the request count, the prompt
lengths and the other knobs (``Family.objectives``), and the model becomes a trace.
Every trace is replayed on the model before it is returned: one whose replay does not
meet its expectations (the grants of every step and the violation) is a prover bug and
raises ``ProverBug``.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Optional, Sequence, Union

import z3

from ..model import BudgetPolicy
from ..spec.intlike import BoolLike
from ..model.replay import ReplayResult, replay_on_model
from ..spec.trace import Trace
from .symbolic import SymbolicConfig
from .trace_family import FAMILY_STEPS, Family, family_config
from .solving import Z3_VERSION, check, minimise, solver

FOUND_BY = f"tokenbudget prove (z3 {Z3_VERSION})"

# What a search looks for, given the families of one size (one per policy compared).
Goal = Callable[[Sequence[Family]], BoolLike]
# Extra judgement of the replays beyond their expectations (spec predicates a replay does
# not run); returns what is wrong, or None.
Judge = Callable[[Sequence[Trace], Sequence[ReplayResult]], Optional[str]]
# The violation a trace expects: an invariant id, None, or computed from the model.
Violation = Union[Optional[str], Callable[[z3.ModelRef, Sequence[Family]], Optional[str]]]


class ProverBug(AssertionError):
    """A counterexample that does not replay as the prover said it would."""


@dataclass(frozen=True)
class Found:
    traces: tuple[Trace, ...]  # one per policy compared
    requests: int
    steps: int


def search(policies: Sequence[BudgetPolicy], goal: Goal, violation: Violation, what: str, max_requests: int,
           timeout_s: float, judge: Optional[Judge] = None, fixed: Optional[dict[str, Any]] = None,
           check_validation: bool = True, max_steps: int = FAMILY_STEPS, min_requests: int = 1,
           scheduled_tokens_set: Sequence[bool] = (False, True), max_size: Optional[int] = None) -> Optional[Found]:
    """The smallest trace of the family that meets ``goal``, replayed and verified; None when
    no trace of ``min_requests`` to ``max_requests`` requests and up to ``max_steps`` steps does.

    ``violation`` names the invariant the replay must show, or computes it from the model
    (None: the goal is judged by ``judge`` only). ``fixed`` pins config knobs;
    ``check_validation`` False searches configs the policy refuses, replayed with its
    validation bypassed by ``judge``; ``scheduled_tokens_set`` says whether configs leave
    ``max_num_scheduled_tokens`` unset (False), set it (True), or either; ``max_size`` bounds
    requests + steps. Raises Unknown on a z3 timeout, ProverBug when a replay disagrees.
    """
    largest = max_requests + max_steps if max_size is None else min(max_size, max_requests + max_steps)
    configs: dict[tuple[int, bool], SymbolicConfig] = {}

    def config(i: int, scheduled_set: bool) -> SymbolicConfig:
        if (i, scheduled_set) not in configs:
            configs[i, scheduled_set] = family_config(policies[i], scheduled_set, fixed=fixed)
        return configs[i, scheduled_set]

    for size in range(min_requests + 1, largest + 1):
        for steps in range(1, max_steps + 1):
            n = size - steps
            if not min_requests <= n <= max_requests:
                continue
            for scheduled_set in scheduled_tokens_set:
                families = [Family(p, n, steps, scheduled_set, fixed=fixed, check_validation=check_validation,
                                   sc=config(i, scheduled_set)) for i, p in enumerate(policies)]
                constraints = [c for f in families for c in f.constraints]
                target = goal(families)
                found = solver(timeout_s, *constraints, target)
                if not check(found, f"{what} ({n} requests, {steps} steps)"):
                    continue
                model = minimise([*constraints, target], families[0].objectives(), timeout_s, f"minimising {what}",
                                 start=found.model())
                description = found_description(what, n, steps)
                named = violation(model, families) if callable(violation) else violation
                traces = tuple(f.trace(model, named, description, FOUND_BY) for f in families)
                verify(traces, named, judge, None if check_validation else [bypassed(p) for p in policies])
                return Found(traces, n, steps)
    return None


def found_description(what: str, requests: int, steps: int) -> str:
    """A counterexample's description: what it breaks and its size."""
    return (f"{what}: the smallest counterexample tokenbudget prove found "
            f"({requests} request{'s' * (requests != 1)}, {steps} step{'s' * (steps != 1)})")


def verify(traces: Sequence[Trace], violation: Optional[str], judge: Optional[Judge],
           replay_as: Optional[Sequence[BudgetPolicy]] = None) -> list[ReplayResult]:
    """Replay every trace on the model (under ``replay_as`` instead of the trace's policy,
    if given); ProverBug unless each meets its expectations (the grants of every step, the
    violation) and ``judge`` accepts them together."""
    results = [replay_on_model(t, None if replay_as is None else replay_as[i]) for i, t in enumerate(traces)]
    for trace, result in zip(traces, results):
        if not result.ok:
            raise ProverBug(f"{trace.policy}: the counterexample does not replay: {'; '.join(result.problems)}")
        if violation is not None and violation not in {v.invariant for v in result.violations}:
            raise ProverBug(f"{trace.policy}: the counterexample replays without a {violation} violation")
    complaint = judge(traces, results) if judge is not None else None
    if complaint is not None:
        raise ProverBug(f"the counterexample does not replay as found: {complaint}")
    return results


def bypassed(policy: BudgetPolicy) -> BudgetPolicy:
    """The policy with its validation switched off: every config is served as given."""
    cls = type(policy)
    unvalidated = type(f"{cls.__name__}Unvalidated", (cls,), {"validate": lambda self, cfg: None,
                                                               "__module__": cls.__module__})
    return unvalidated()  # type: ignore[no-any-return]
