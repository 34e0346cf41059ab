"""A same-step preemption credits its refund twice (the rollback and a second restore)."""
from tokenbudget.model import Budgets
from tokenbudget.model.vllm.policies import VllmAdaptive


class Policy(VllmAdaptive):
    name = "vllm-refund-twice"

    def refund(self, p, grant, is_decode):
        return Budgets(2 * grant, 2 * (grant + p.draft_slots))
