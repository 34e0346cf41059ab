"""User policies that the prover must judge, not crash on: each overrides one method of a
built-in the way an engineer would, with the mistake its docstring names."""
from __future__ import annotations

from tokenbudget.model import Budgets, and_
from tokenbudget.model.vllm_policies import VllmAdaptive


class GrantBranchesWithIf(VllmAdaptive):
    """``grant`` as a Python ``if``: fine on ints, a Z3Exception on z3 terms (use ite)."""

    def grant(self, p, wanted, budgets):  # type: ignore[no-untyped-def]
        if wanted > budgets.token:
            return budgets.token
        return wanted


class ChargeWithMax(VllmAdaptive):
    """``charge`` with the builtin ``max`` (use max_)."""

    def charge(self, p, grant, is_decode):  # type: ignore[no-untyped-def]
        return Budgets(grant, max(grant, grant + p.draft_slots))


class ExitRuleWithAnd(VllmAdaptive):
    """``may_schedule`` with Python ``and`` (use and_)."""

    def may_schedule(self, p, b):  # type: ignore[no-untyped-def]
        return b.token > 0 and b.input > p.draft_slots


class LooseExitRule(VllmAdaptive):
    """The exit rule ``input >= d`` for ``> d``: the waiting loop comes to grant 0."""

    def may_schedule(self, p, b):  # type: ignore[no-untyped-def]
        return and_(b.token > 0, b.input >= p.draft_slots)


class StrictExitRule(VllmAdaptive):
    """The exit rule ``input > d + 1`` for ``> d``: B = d + 1 is accepted and never schedules."""

    def may_schedule(self, p, b):  # type: ignore[no-untyped-def]
        return and_(b.token > 0, b.input > p.draft_slots + 1)


class RefundForgetsDraftSlots(VllmAdaptive):
    """A same-step refund gives back ``grant`` to the input budget, not ``grant + d``."""

    def refund(self, p, grant, is_decode):  # type: ignore[no-untyped-def]
        return Budgets(grant, grant)
