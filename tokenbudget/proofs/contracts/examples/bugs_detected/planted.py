"""Two planted bugs in vllm-adaptive, each caught by a contract it inherits.

``crosshair check tokenbudget.proofs.contracts.examples.bugs_detected.planted`` reports
both: the refund forgets the draft slots (``BudgetPolicy.refund``: give back exactly
the charge), and the grant forgets to leave room for them (``VllmAdaptive.grant``:
the input budget stays >= 0).
"""
from __future__ import annotations

from .....spec.intlike import BoolLike, IntLike, min_
from .....model.policy import BudgetParams, Budgets
from .....model.vllm.policies import VllmAdaptive


class RefundWithoutDraftSlots(VllmAdaptive):
    def refund(self, p: BudgetParams, grant: IntLike, is_decode: BoolLike) -> Budgets:
        return Budgets(grant, grant)


class GrantWithoutDraftSlots(VllmAdaptive):
    def grant(self, p: BudgetParams, demand: IntLike, b: Budgets) -> IntLike:
        return min_(demand, b.token, b.input)
