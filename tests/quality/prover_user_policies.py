"""User policies that the prover must judge, not crash on: each overrides one method of a
built-in the way an engineer would, with the mistake its docstring names."""
from __future__ import annotations

from tokenbudget.model import Budgets, and_, ite, max_
from tokenbudget.model.vllm.policies import VllmAdaptive


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


class ChargeFloor(VllmAdaptive):
    """Charges each scheduled request at least 4 tokens and 4 input slots (a kernel's smallest
    tile): ``max_(charge, 4)``, not affine in the grant. The grant is not floored with it, so
    a short budget is charged past what is left."""

    def charge(self, p, grant, is_decode):  # type: ignore[no-untyped-def]
        charged = super().charge(p, grant, is_decode)
        return Budgets(max_(charged.token, 4), max_(charged.input, 4))


class DflashRunnerRows(VllmAdaptive):
    """A DFlash drafter's query is at least k + 1 positions whatever the grant, so the input
    budget is charged ``max_(grant, k + 1) + d`` rows (not affine in the grant), and the exit
    rule keeps room for them: safe."""

    def runner_rows(self, p, grant, is_decode):  # type: ignore[no-untyped-def]
        return ite(p.method == "dflash", max_(grant, p.num_speculative_tokens + 1), grant) + p.draft_slots

    def charge(self, p, grant, is_decode):  # type: ignore[no-untyped-def]
        return Budgets(grant, self.runner_rows(p, grant, is_decode))

    def may_schedule(self, p, b):  # type: ignore[no-untyped-def]
        return and_(b.token > 0, b.input > p.draft_slots + ite(p.method == "dflash", p.num_speculative_tokens, 0))
