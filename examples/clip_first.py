"""A loop change: clip a running request to max_model_len before the threshold and the budgets."""
from tokenbudget.model import VllmLoop, decisions, min_
from tokenbudget.model.vllm.policies import VllmAdaptive


class ClipFirstLoop(VllmLoop):
    @classmethod
    def running_grant(cls, policy, p, budgets, demand, computed, threshold, max_model_len, bypass):
        room = max_model_len - computed - 1
        wanted = decisions.capped_by_threshold(min_(demand, room), threshold)
        return min_(policy.grant(p, wanted, budgets), room)  # room <= 0: skipped, as before


class ClipFirst(VllmAdaptive):
    name = "clip-first"
    description = "vllm-adaptive on a loop that clips to max_model_len first"
    loop = ClipFirstLoop
