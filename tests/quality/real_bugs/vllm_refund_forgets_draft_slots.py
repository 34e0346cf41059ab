"""A same-step preemption gives the input budget back ``grant``, not the ``grant + d`` it was
charged (vLLM's refund is ``input_budget += restored + draft_slots``, scheduler.py:819)."""
from tokenbudget.model import Budgets
from tokenbudget.model.vllm.policies import VllmAdaptive


class Policy(VllmAdaptive):
    name = "vllm-refund-forgets-draft-slots"

    def refund(self, p, grant, is_decode):
        return Budgets(grant, grant)
