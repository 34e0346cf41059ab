"""The loops stop once ``input_budget <= d + 1``: with B = d + 1 nothing is ever scheduled."""
from tokenbudget.model import and_
from tokenbudget.model.vllm.policies import VllmAdaptive


class Policy(VllmAdaptive):
    name = "vllm-exit-rule-strict"

    def may_schedule(self, p, b):
        return and_(b.token > 0, b.input > p.draft_slots + 1)
