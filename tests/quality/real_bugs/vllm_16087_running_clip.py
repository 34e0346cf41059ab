"""vLLM PR #16087: a running request's grant (its drafts included) was never clipped to
``max_model_len - 1 - computed``, so drafts were scheduled past max_model_len."""
from tokenbudget.model import VllmLoop, decisions, ite
from tokenbudget.model.vllm.policies import VllmAdaptive


class NoModelLenClip(VllmLoop):
    @classmethod
    def running_grant(cls, policy, p, budgets, demand, computed, threshold, max_model_len, bypass):
        wanted = decisions.capped_by_threshold(demand, threshold)
        return ite(bypass, wanted, policy.grant(p, wanted, budgets))  # no min(..., max_model_len - computed - 1)


class Policy(VllmAdaptive):
    name = "vllm-16087-running-clip"
    loop = NoModelLenClip
