"""FastDeployLoop: FastDeploy's scheduling pass, ``ResourceManagerV1.schedule``
(fastdeploy/engine/sched/resource_manager_v1.py, cited at #7623's merge, 2a606e361).

One ``token_budget``; running requests first, then waiting ones (skipped after a
preemption, :962), both loops only while ``token_budget > 0`` (:809, :964). A decode's
grant is its one new token: the drafts ride outside it, and its KV covers them too. Only
a decode the loop visits gets new KV blocks (:831-858). The worker runs the others on
the blocks they already hold and pauses a decode whose next step would cross into a
block it lacks (``speculate_schedule_cache.cu``:50-69 sets ``is_block_step``); a later
visit that gives it blocks resumes it (``recover_decode_task``, gpu_model_runner.py:1249).
A paused decode runs 0 rows: it is listed in the StepRecord's ``paused``, never granted.

Preemption (``_trigger_preempt``, :387-443) pops the tail of the running list (the shared
``victim`` under FCFS, the only order FastDeploy schedules in) and never refunds. The waiting pass is the shared one
(``SchedulerLoop._schedule_waiting``), unpadded; ``long_prefill_token_threshold`` is not
read by the V1 scheduler. The KV pool and its admission gate are the model's vLLM-like
ones (SPEC.md §5).
"""
from __future__ import annotations

from typing import Optional

from ..spec import grant_rules
from . import decisions
from .loop import SchedulerLoop
from .request import Request
from .step_pass import StepPass


class FastDeployLoop(SchedulerLoop):
    drafts_in_grant = False
    pads_short_admissions = False
    decodes_bypass_budget = True
    applies_long_prefill_threshold = False
    # FCFS only: the victim is the tail, which the running pass has not granted yet, so
    # unschedules_refunded is never read.
    honours = SchedulerLoop.honours - {"unschedules_refunded"}
    decodes_run_decode_rows = True  # the worker runs 1 + k rows of a decode granted 1

    @classmethod
    def method_table(cls, version: Optional[str]) -> str:
        return "fastdeploy"

    def _schedule_running(self, step: StepPass, threshold: int) -> None:
        policy, cfg = self.policy, self.cfg
        stopped = False  # token_budget <= 0: the loop visits nobody more
        i = 0
        while i < len(self.running):
            req = self.running[i]
            stopped = stopped or (self.running_checks_exit_rule and not step.may_schedule())
            if stopped and not req.is_decoding:
                i += 1
                continue
            computed = req.num_computed_tokens
            grant = self.running_grant(policy, self.params, step.budgets, req.num_tokens - computed, computed,
                                       threshold, cfg.max_model_len, req.is_decoding)
            if grant <= 0:
                i += 1
                continue
            num_drafts = decisions.scheduled_drafts(self.drafts_in_grant, req.num_draft_tokens, computed, grant,
                                                    req.num_tokens, req.is_decoding)
            if stopped:
                self._run_unvisited_decode(step, req, grant, num_drafts)
                i += 1
                continue
            next_index = self._grant_running(step, i, grant, num_drafts, kv_tokens=grant + num_drafts)
            if next_index is None:
                break
            i = next_index

    def _run_unvisited_decode(self, step: StepPass, req: Request, grant: int, num_drafts: int) -> None:
        """The worker's pause test (``speculate_schedule_cache.cu``:50-69): the decode runs
        if its next step fits in the blocks it holds, else it pauses and runs 0 rows."""
        slots = grant_rules.kv_slots_needed(req.num_computed_tokens, grant + num_drafts, self.lookahead,
                                            self.cfg.max_model_len)
        if self.pool.blocks_needed(req, slots, []) > 0:
            step.paused.append(req.request_id)
            return
        self.pool.cache_full_blocks(req, min(req.num_computed_tokens + grant, req.num_tokens))
        step.record_grant(req, grant, num_drafts, padded=False)
        step.scheduled_running.append(req)

    def _decode_fits(self, req: Request, free: int) -> bool:
        """Whether the decode's next step (one token, its drafts and the lookahead) fits in the
        blocks it holds and ``free`` more: 0 runs it unvisited (``_run_unvisited_decode``'s test)."""
        computed, max_len = req.num_computed_tokens, self.cfg.max_model_len
        grant = min(1, max_len - computed - 1)
        if grant <= 0:
            return False
        slots = grant_rules.kv_slots_needed(computed, grant + req.num_draft_tokens, self.lookahead, max_len)
        return self.pool.blocks_needed(req, slots, []) <= free

    def _progress_possible(self, step: StepPass) -> bool:
        """Budget left by the exit rule and KV for some request's next token; or, with no
        budget, a decode that could take a token: one that runs on its own blocks, or one
        the worker pauses whose next blocks the pool holds (a visit would give them to it
        and resume it, ``recover_decode_task``)."""
        if not step.may_schedule():
            if not self.running:  # an exit rule that refuses the budgets of an idle system stalls it for good
                return self._room_for_a_token(admit=True)
            free = self.pool.num_free
            return any(r.is_decoding and self._decode_fits(r, free) for r in self.running)
        return self._room_for_a_token(admit=True)
