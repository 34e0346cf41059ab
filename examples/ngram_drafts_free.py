"""A budget-rule change: ngram drafts are proposed on the CPU, so charge them no draft slots."""
from tokenbudget.model import Budgets, and_, ite, min_
from tokenbudget.model.vllm.policies import VllmAdaptive


class NgramDraftsFree(VllmAdaptive):
    name = "ngram-drafts-free"
    description = "vllm-adaptive, but an ngram request is charged no draft slots"

    def slots(self, p):
        return ite(p.method == "ngram", 0, p.draft_slots)  # `==` on p.method, never a Python `if`

    def may_schedule(self, p, b):
        return and_(b.token > 0, b.input > self.slots(p))

    def grant(self, p, demand, b):
        return min_(demand, b.token, b.input - self.slots(p))

    def charge(self, p, grant, is_decode):
        return Budgets(grant, grant + self.slots(p))
