"""The loops go on while ``input_budget >= d`` (vLLM breaks at ``input_budget <= draft_slots``,
scheduler.py:661), so a request can be granted 0 tokens."""
from tokenbudget.model import and_
from tokenbudget.model.vllm.policies import VllmAdaptive


class Policy(VllmAdaptive):
    name = "vllm-exit-rule-loose"

    def may_schedule(self, p, b):
        return and_(b.token > 0, b.input >= p.draft_slots)
