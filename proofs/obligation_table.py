"""The table of obligations ``tokenbudget prove`` decides, in the order it prints them."""
from __future__ import annotations

from typing import Optional

from ..model import BudgetPolicy
from .config_obligations import config_obligations
from .efficiency_obligations import efficiency_obligations
from .obligations import Context, Obligation, Options, step_obligations
from .verdicts import Outcome


def all_obligations() -> dict[str, Obligation]:
    """Every obligation, in the order of the table ``tokenbudget prove`` prints."""
    return {o.id: o for o in step_obligations() + config_obligations() + efficiency_obligations()}


def decide(policy: BudgetPolicy, obligation: Obligation, options: Options, ctx: Optional[Context] = None) -> Outcome:
    """The verdict of one obligation (``ctx`` shares the induction among a policy's obligations)."""
    return obligation.decide(ctx or Context(policy, options))

