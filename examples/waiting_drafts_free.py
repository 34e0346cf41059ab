"""A newcomer's budget rule: charge a waiting request its grant alone, as if drafts ran only on decodes."""
from tokenbudget.model import Budgets, ite
from tokenbudget.model.vllm.policies import VllmAdaptive


class WaitingDraftsFree(VllmAdaptive):
    name = "waiting-drafts-free"
    description = "vllm-adaptive, but a waiting request is charged no draft slots"

    def charge(self, p, grant, is_decode):
        return Budgets(grant, grant + ite(is_decode, p.draft_slots, 0))  # a prefill's d rows forgotten
