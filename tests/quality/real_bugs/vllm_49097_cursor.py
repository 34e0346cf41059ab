"""vLLM #49097: under PRIORITY, a victim that stood before the request being scheduled leaves
the running queue, but the cursor (``req_index``) is not moved back, so the request after
the current one is silently skipped for the step (scheduler.py:809-812 is the fix)."""
from tokenbudget.model import VllmLoop
from tokenbudget.model.vllm.policies import VllmAdaptive


class CursorNotMovedBack(VllmLoop):
    @classmethod
    def cursor_after_preemption(cls, index, victim_index):
        return index  # the fix: one back when victim_index < index


class Policy(VllmAdaptive):
    name = "vllm-49097-cursor"
    loop = CursorNotMovedBack
