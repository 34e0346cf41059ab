"""vLLM's same-step rollback of a preempted victim has two halves: give the budgets back, and
take the victim off the step's scheduled requests (``scheduled_running_reqs.remove``,
``num_scheduled_tokens.pop``: scheduler.py:814-821). This variant refunds but keeps it listed."""
from tokenbudget.model import VllmLoop
from tokenbudget.model.vllm.policies import VllmAdaptive


class RefundKeepsVictimScheduled(VllmLoop):
    unschedules_refunded = False


class Policy(VllmAdaptive):
    name = "vllm-rollback-scheduled-list"
    loop = RefundKeepsVictimScheduled
