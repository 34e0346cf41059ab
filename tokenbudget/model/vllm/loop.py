"""VllmLoop: vLLM 0.32's scheduling pass, ``Scheduler.schedule`` (vllm/v1/core/sched/scheduler.py, 0.32.0)."""
from __future__ import annotations

from functools import cached_property
from typing import Optional

from .. import decisions, methods
from . import columnar as columnar_vllm
from ..one_pass_loop import OnePassLoop
from ...spec.records import StepOutcome, StepRecord
from ..request import Request
from ..step_pass import StepPass
from .versions import DRAFT_PASS_METHODS, VLLM_VERSIONS, VllmVersion, rules_for


class VllmLoop(OnePassLoop):
    drafts_in_grant = True
    pads_short_admissions = True
    decodes_bypass_budget = False
    honours = OnePassLoop.honours
    columnar_min_running: Optional[int] = columnar_vllm.MIN_RUNNING  # None: every step scalar

    def schedule(self) -> StepRecord:
        """The pass; columnar (``columnar_vllm``) when the running queue is large and the
        loop and policy are built-ins it models, with the same record as the scalar pass."""
        floor = self.columnar_min_running
        if floor is not None and len(self.running) >= floor and type(self) is VllmLoop \
                and columnar_vllm.applies(self):
            record = columnar_vllm.schedule(self)
            if record is not None:
                return record
        self.columnar_memo.forget()
        return super().schedule()

    def update_from_output(self, record: StepRecord, accepted: dict[str, int] | None = None) -> StepOutcome:
        if self.columnar_memo.last is not None:
            outcome = columnar_vllm.update(self, record, accepted or {})
            if outcome is not None:
                return outcome
        self.columnar_memo.forget()
        return super().update_from_output(record, accepted)

    @cached_property
    def columnar_memo(self) -> columnar_vllm.Memo:
        """What a columnar step leaves for its output and the next step (a cache, not state)."""
        return columnar_vllm.Memo()

    @classmethod
    def method_table(cls, version: Optional[str]) -> str:
        """The version's table (``VLLM_VERSIONS``); without a version, the default one."""
        return VLLM_VERSIONS[version].table if version in VLLM_VERSIONS else methods.DEFAULT_TABLE

    def _schedule_running(self, step: StepPass, threshold: int) -> None:
        policy, params, max_model_len = self.policy, self.params, self.cfg.max_model_len
        checks_exit_rule, running_grant = self.running_checks_exit_rule, self.running_grant
        continues = self._continues_after_self_preemption()
        i = 0
        while i < len(self.running):
            if checks_exit_rule and not step.may_schedule():
                break
            req = self.running[i]
            if self._finishes_in_flight(req):
                i += 1
                continue
            computed, known, drafts = req.num_computed_tokens, self._known_tokens(req), req.num_draft_tokens
            grant = running_grant(policy, params, step.budgets, known + drafts - computed, computed, threshold,
                                  max_model_len, False)
            if grant <= 0:
                i += 1
                continue
            num_drafts = self._running_drafts(req, grant, known)
            after = self.running[i + 1:] if continues else []
            next_index = self._grant_running(step, i, grant, num_drafts, kv_tokens=grant)
            if next_index is None:
                if not continues:
                    break
                next_index = next((self.running.index(r) for r in after if r in self.running), len(self.running))
            i = next_index

    def _finishes_in_flight(self, req: Request) -> bool:
        """Whether tokens in flight finish ``req``, so the running pass skips it (none here)."""
        return False

    def _known_tokens(self, req: Request) -> int:
        """The tokens a running request's grant counts up to: its own."""
        return req.num_tokens

    def _running_drafts(self, req: Request, grant: int, known: int) -> int:
        """The drafts a running request's ``grant`` schedules."""
        return decisions.scheduled_drafts(self.drafts_in_grant, req.num_draft_tokens, req.num_computed_tokens, grant,
                                          known, req.is_decoding)

    @cached_property
    def rules(self) -> VllmVersion:
        """The row of the version table this loop follows."""
        return rules_for(self.need.version, self.need.table)

    def _continues_after_self_preemption(self) -> bool:
        """0.33: under priority scheduling the running pass goes on past a request that
        preempted itself (the requests after it rank higher); 0.32 ends the pass."""
        return self.cfg.scheduling_policy == "priority" and not self.rules.self_preemption_ends_pass

    def reads_long_prefill_threshold(self) -> bool:
        """0.34: only with chunked prefill (vllm/v1/core/sched/scheduler.py:775-779 (vLLM 0.34.0))."""
        if self.rules.long_prefill_needs_chunking and not self.cfg.enable_chunked_prefill:
            return False
        return super().reads_long_prefill_threshold()

    def _caches_blocks_at_output(self) -> bool:
        """0.33, with speculation: ``update_from_output`` caches a decode's completed blocks."""
        return self.rules.caches_blocks_at_output and self.k > 0

    def _stop_cuts_computed(self) -> bool:
        """0.33: the computed count drops the output tokens a stop cuts, so the blocks
        cached at that output end one token before the request's last token."""
        return self.rules.stop_cuts_computed

    def _admission_seq_cap(self) -> int:
        """0.33: DFlash and DSpark draft in a pass of B // L query rows at most, so at most
        that many requests run (``max_num_active_seqs``)."""
        cap = self.cfg.max_num_seqs
        if self.rules.draft_pass_caps_seqs and self.cfg.method in DRAFT_PASS_METHODS and self.lookahead > 0:
            cap = min(cap, self.cfg.max_num_batched_tokens // self.lookahead)
        return cap

    def _progress_possible(self, step: StepPass) -> bool:
        """KV for some request's next token. The exit rule is not asked: progress is judged
        in a step that granted nothing, whose budgets are the pass's initial ones, so an
        exit rule that refuses them refuses every later pass alike (a stall)."""
        return self._room_for_a_token(admit=True)
