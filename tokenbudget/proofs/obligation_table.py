"""The table of obligations ``tokenbudget prove`` decides, in the order it prints them."""
from __future__ import annotations

from dataclasses import replace
from typing import Optional

from ..model import BudgetPolicy
from ..spec import INVARIANTS
from .config_obligations import config_obligations
from .efficiency_obligations import efficiency_obligations
from .loop_search import SEARCHED, decide as decide_by_search, skeleton_models
from .obligations import Context, Obligation, Options, step_obligations
from .verdicts import Outcome


def all_obligations() -> dict[str, Obligation]:
    """Every obligation, in the order of the table ``tokenbudget prove`` prints. A policy
    whose loop the pass skeleton models gets the skeleton's; any other is decided by the
    bounded trace search over the model (``loop_search``) on the invariants it judges."""
    table = {o.id: _by_loop(o) for o in step_obligations() + config_obligations() + efficiency_obligations()}
    for name in SEARCHED:
        if name not in table:
            table[name] = Obligation(name, "safety", INVARIANTS[name].holds_when,
                                     lambda ctx, name=name: decide_by_search(ctx, name),
                                     lambda policy: not skeleton_models(policy))
    return table


def _by_loop(o: Obligation) -> Obligation:
    """``o`` for skeleton-modelled loops; a searched invariant's search for the others."""
    searched = o.id in SEARCHED
    return replace(
        o,
        decide=lambda ctx: o.decide(ctx) if skeleton_models(ctx.policy) else decide_by_search(ctx, o.id),
        applies=lambda policy: o.applies(policy) if skeleton_models(policy) else searched,
    )


def decide(policy: BudgetPolicy, obligation: Obligation, options: Options, ctx: Optional[Context] = None) -> Outcome:
    """The verdict of one obligation (``ctx`` shares the induction among a policy's obligations)."""
    return obligation.decide(ctx or Context(policy, options))

