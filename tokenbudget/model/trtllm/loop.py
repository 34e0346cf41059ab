"""TrtllmLoop: TensorRT-LLM's scheduling step on the PyTorch backend, capacity scheduler
then micro-batch scheduler (tensorrt_llm/_torch/pyexecutor/scheduler/scheduler.py,
NVIDIA/TensorRT-LLM at 002f3cc3d, cited by function: SPEC.md §9 says why not by line)."""
from __future__ import annotations

from typing import Optional

from .. import decisions
from ..one_pass_loop import OnePassLoop
from ..request import Request
from ..step_pass import StepPass
from ...spec.records import StepOutcome, StepRecord


class TrtllmLoop(OnePassLoop):
    drafts_in_grant = False
    pads_short_admissions = False
    decodes_bypass_budget = False
    applies_long_prefill_threshold = False
    # The micro-batch walk grants through ``decisions.running_grant``, checks the exit rule
    # itself and pauses the tail (``_pick_victim``), which the walk has not reached: so no
    # victim was granted in the pass, and unschedules_refunded is never read either.
    honours = frozenset({"admission", "cursor_after_preemption", "waiting_checks_exit_rule"})
    decodes_run_decode_rows = True  # the forward runs 1 + k rows of a generation request, whatever was charged

    @classmethod
    def method_table(cls, version: Optional[str]) -> str:
        return "trtllm"

    def schedule(self) -> StepRecord:
        record = super().schedule()
        self._decodes_first()
        return record

    def update_from_output(self, record: StepRecord, accepted: dict[str, int] | None = None) -> StepOutcome:
        outcome = super().update_from_output(record, accepted)
        self._decodes_first()
        return outcome

    def _decodes_first(self) -> None:
        """Generation requests ahead of context chunks, each group in queue order: the order
        in which the micro-batch scheduler charges them."""
        self.running.sort(key=lambda r: not r.is_decoding)

    def _schedule_running(self, step: StepPass, threshold: int) -> None:
        policy, cfg = self.policy, self.cfg
        i = 0
        while i < len(self.running):
            if not step.may_schedule():
                break
            req = self.running[i]
            computed = req.num_computed_tokens
            grant = decisions.running_grant(policy, self.params, step.budgets, req.num_tokens - computed, computed,
                                            threshold, cfg.max_model_len, False)
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
        """MAX_UTILIZATION's pause: the last started request, the tail of the RUNNING queue."""
        return self.running[-1]

    def _progress_possible(self, step: StepPass) -> bool:
        """Budget left by the exit rule, and KV for some request's next token."""
        return step.may_schedule() and self._room_for_a_token(admit=True)
