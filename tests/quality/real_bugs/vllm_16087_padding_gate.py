"""vLLM PR #16087, the admission half: a 1-token admission is padded to 1 + k without asking
whether the padded drafts still fit under max_model_len."""
from tokenbudget.model import VllmLoop, decisions
from tokenbudget.model.vllm.policies import VllmAdaptive


class PadsPastModelLen(VllmLoop):
    @classmethod
    def admission(cls, policy, p, budgets, demand, computed, threshold, max_model_len, k, prefill_scheduled,
                  running_scheduled, chunked_prefill):
        no_gate = max_model_len + k + 2  # the padding gate computed + 1 + k + 1 <= max_model_len always passes
        return decisions.admission(policy, p, budgets, demand, computed, threshold, no_gate, k, True,
                                   prefill_scheduled, running_scheduled, chunked_prefill)


class Policy(VllmAdaptive):
    name = "vllm-16087-padding-gate"
    loop = PadsPastModelLen
