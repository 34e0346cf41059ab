"""vLLM #44123: the only ``max_num_scheduled_tokens <= 0`` guard sat behind ``if
speculative_config is not None``, so without speculation a negative value passed validation
and became the token budget (fixed by PR #44207, a field-level ``ge=0``)."""
from tokenbudget.model import Requirement, not_, or_
from tokenbudget.model.vllm.policies import VllmAdaptive


class Policy(VllmAdaptive):
    name = "vllm-44123-negative-t"

    def shared_requirements(self, c):
        return [r for r in super().shared_requirements(c) if r.name != "max_num_scheduled_tokens-positive"]

    def requirements(self, p):
        cap = self.token_cap(p)
        gated = Requirement(or_(not_(p.spec_enabled), cap > 0), lambda: f"max_num_scheduled_tokens is {cap}, which "
                            "allows no token", name="token-cap-positive")
        return [r for r in super().requirements(p) if r.name != "token-cap-positive"] + [gated]
