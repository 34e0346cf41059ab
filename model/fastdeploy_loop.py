"""FastDeployLoop: FastDeploy's scheduling pass, ``ResourceManagerV1.schedule``
(fastdeploy/engine/sched/resource_manager_v1.py).

One ``token_budget``, running requests first, then waiting ones (skipped after a
preemption), both loops while ``token_budget > 0``. A decode's grant is its one new
token: the drafts ride outside it, and its KV covers them too. The worker runs every
decode each step, whether or not the scheduler visited it, so once the budget stops the
loop from visiting, the model still grants each remaining decode 1 token (charged as
the policy says) and skips only the prefill chunks. Preemption (``_trigger_preempt``)
pops the tail of the running list; FastDeploy schedules FCFS only. The waiting pass is
the shared one (``SchedulerLoop._schedule_waiting``), unpadded; the KV pool and its
whole-sequence admission gate are the model's vLLM-like ones (SPEC.md §5).
"""
from __future__ import annotations

from . import decisions
from .loop import SchedulerLoop
from .request import Request
from .step_pass import StepPass


class FastDeployLoop(SchedulerLoop):
    drafts_in_grant = False
    pads_short_admissions = False
    decodes_bypass_budget = True

    def _schedule_running(self, step: StepPass, threshold: int) -> None:
        policy, cfg = self.policy, self.cfg
        stopped = False
        i = 0
        while i < len(self.running):
            req = self.running[i]
            bypass = req.is_decoding
            if not bypass and (stopped or not step.may_schedule()):
                stopped = True  # the engine stops visiting, but its worker still runs every decode
                i += 1
                continue
            computed = req.num_computed_tokens
            grant = decisions.running_grant(policy, self.params, step.budgets, req.num_tokens - computed, computed,
                                            threshold, cfg.max_model_len, bypass)
            if grant <= 0:
                i += 1
                continue
            num_drafts = decisions.scheduled_drafts(self.drafts_in_grant, req.num_draft_tokens, computed, grant,
                                                    req.num_tokens, req.is_decoding)
            next_index = self._grant_running(step, i, grant, num_drafts, kv_tokens=grant + num_drafts)
            if next_index is None:
                break
            i = next_index

    def _pick_victim(self) -> Request:
        return self.running[-1]

    def _progress_possible(self, step: StepPass) -> bool:
        """Budget left by the exit rule, or a decode that runs regardless; and KV for some
        request's next token (a waiting one only with budget left)."""
        may = step.may_schedule()
        if not may and not any(r.is_decoding for r in self.running):
            return False
        return self._room_for_a_token(admit=may)
