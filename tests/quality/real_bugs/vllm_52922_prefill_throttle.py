"""vLLM #52922: prefill throttling charged a prefill chunk to the step's token budget twice
(once for the pass, once for the throttle), so with B = 18 the second 8-token prefill got
2 tokens, not 8. Nothing overflows: the budget is wasted while requests wait."""
from tokenbudget.model import Budgets, ite
from tokenbudget.model.vllm.policies import VllmAdaptive


class Policy(VllmAdaptive):
    name = "vllm-52922-prefill-throttle"

    def charge(self, p, grant, is_decode):
        return Budgets(ite(is_decode, grant, 2 * grant), grant + p.draft_slots)
