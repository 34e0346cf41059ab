"""TrtllmLoop: TensorRT-LLM's scheduling step on the PyTorch backend, capacity scheduler
then micro-batch scheduler (tensorrt_llm/_torch/pyexecutor/scheduler/scheduler.py,
NVIDIA/TensorRT-LLM at 002f3cc3d, cited by function: SPEC.md §9 says why not by line)."""
from __future__ import annotations

import bisect
from typing import Optional

from .. import decisions
from .chunking import aligned_chunk
from .deployments import GUARANTEED_NO_EVICT, MAX_REQUESTS, MAX_UTILIZATION, capacity_of
from ...spec.intlike import cdiv
from ..one_pass_loop import OnePassLoop
from ..request import Request, Status
from ...spec import grant_rules
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
    skeleton_follows = False  # the capacity pass before the chunks (``_schedule_waiting``) is its own

    @classmethod
    def method_table(cls, version: Optional[str]) -> str:
        return "trtllm"

    def _schedule_step(self, step: StepPass) -> None:
        """The running pass, then the waiting pass over the requests that arrived before the first
        one paused: MAX_UTILIZATION goes on after a pause, its walk cut at the paused request
        (``req_it_end = last_started_idx``, scheduler.py:1651-1664)."""
        self._schedule_running(step, 0)
        paused = [self.requests[rid].arrival for rid in step.preempted]
        self._schedule_waiting(step, 0, min(paused) if paused else None)

    def _schedule_waiting(self, step: StepPass, threshold: int, arrived_before: Optional[int] = None) -> None:
        """The capacity pass over the waiting contexts, then their chunks (scheduler.py:2246-2253).

        Capacity: in arrival order, each context passes the capacity policy's gate against what
        the pass counted before it (``_whole_sequence_fits``), or MAX_UTILIZATION pauses the last
        started request that arrived after it and tries again, or the pass ends; budget or not.
        Chunks: the contexts let through, in order, each the shared decision with its chunk
        aligned to the block size; one aligned to nothing is passed over (``_chunk_fcfs`` sizes
        every context, scheduler.py:1219-1259), an unchunked one that does not fit ends them."""
        admitted = self._capacity_pass(step, arrived_before)
        cfg, serving = self.cfg, True
        for req in admitted:
            serving = serving and (step.may_schedule() or not self.waiting_checks_exit_rule)
            if not serving:
                break
            hits = self.pool.find_cached_prefix(req) if req.num_computed_tokens == 0 else []  # after the pauses
            computed = req.num_computed_tokens + len(hits) * cfg.block_size
            demand = req.num_tokens - computed
            decision = self.admission(self.policy, self.params, step.budgets, demand, computed, threshold,
                                      cfg.max_model_len, self.k, step.prefill_scheduled,
                                      bool(step.scheduled_running), self.params.enable_chunked_prefill)
            if decision.stop:
                break
            grant = int(aligned_chunk(decision.grant, demand, cfg.block_size))  # scheduler.py:1249-1251
            if grant <= 0:
                continue
            slots = grant_rules.kv_slots_needed(computed, self._admission_kv_tokens(req, computed, grant),
                                                self.lookahead, self._kv_len_cap)
            if not self.pool.allocate(req, slots, hits):
                break
            self.waiting.remove(req)
            self.running.append(req)
            req.status = Status.RUNNING
            req.num_computed_tokens = computed
            self.pool.cache_full_blocks(req, min(computed + grant, req.num_tokens))
            step.record_grant(req, grant, 0, False)

    def _capacity_pass(self, step: StepPass, arrived_before: Optional[int]) -> list[Request]:
        """The waiting contexts the capacity scheduler lets through, up to max_num_seqs with the
        running ones; pausing under MAX_UTILIZATION (scheduler.py:1642-1664)."""
        admitted: list[Request] = []
        reserved = index = 0
        while index < len(self.waiting) and len(self.running) + len(admitted) < self._admission_seq_cap():
            req = self.waiting[index]
            index += 1
            if arrived_before is not None and req.arrival >= arrived_before:
                continue
            hits = self.pool.find_cached_prefix(req) if req.num_computed_tokens == 0 else []
            while not self._whole_sequence_fits(req, hits, reserved):
                later = [r for r in self.running if r.arrival > req.arrival] if self.capacity == MAX_UTILIZATION else []
                if not later:
                    return admitted
                victim = max(later, key=lambda r: r.arrival)  # the last started after it (scheduler.py:1648-1664)
                self._pause(step, victim)
                arrived_before = victim.arrival if arrived_before is None else min(arrived_before, victim.arrival)
            admitted.append(req)
            reserved += self._counted_by_capacity(req, hits)
        return admitted

    @property
    def capacity(self) -> str:
        """The capacity policy of the deployment modelled (``deployments``)."""
        return capacity_of(self.cfg.engine_version)

    def _blocks_to_completion(self, req: Request) -> int:
        """getRemainingBlocksToCompletion at beam width 1 (kvCacheManager.cpp): the blocks of
        prompt + max_new_tokens (clipped to max_model_len) less those held; negative when the
        request holds more (its drafts' and the drafter's slots past the end)."""
        end = min(req.num_prompt_tokens + req.max_tokens, self.cfg.max_model_len)
        return cdiv(end, self.cfg.block_size) - len(req.block_ids)

    def _whole_sequence_fits(self, req: Request, hits: list[int], reserved: int = 0) -> bool:
        """The capacity policy's gate for a context: GUARANTEED_NO_EVICT's blocks to completion
        against the free blocks less every started request's and ``reserved`` (scheduler.py:1434-1525,
        NoEvictScheduledBlocksManager 1755-1803); none under MAX_REQUESTS; MAX_UTILIZATION's is
        the shared gate."""
        if self.capacity == MAX_REQUESTS:
            return True
        if self.capacity == GUARANTEED_NO_EVICT:
            reserved += sum(self._blocks_to_completion(r) for r in self.running)
            return self._blocks_to_completion(req) <= self.pool.num_free - reserved
        return self._context_blocks(req, hits) <= self.pool.num_free - reserved

    def _context_blocks(self, req: Request, hits: list[int]) -> int:
        """The blocks a context's first chunk takes: its whole prompt (getNeededBlocksOneStep)."""
        return self.pool.blocks_needed(req, min(req.num_tokens, self.cfg.max_model_len), hits)

    def _counted_by_capacity(self, req: Request, hits: list[int]) -> int:
        """What the capacity scheduler counts for a context it lets through: its blocks to
        completion (GUARANTEED_NO_EVICT) or its first chunk's (MAX_UTILIZATION)."""
        if self.capacity == GUARANTEED_NO_EVICT:
            return self._blocks_to_completion(req)
        return 0 if self.capacity == MAX_REQUESTS else self._context_blocks(req, hits)

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
            if not req.is_decoding:
                grant = aligned_chunk(grant, req.num_tokens - computed, cfg.block_size)  # scheduler.py:1249-1251
            if grant <= 0:
                i += 1
                continue
            num_drafts = decisions.scheduled_drafts(self.drafts_in_grant, req.num_draft_tokens, computed, grant,
                                                    req.num_tokens, req.is_decoding)
            next_index = self._grant_running(step, i, grant, num_drafts, kv_tokens=grant + num_drafts)
            if next_index is None:  # paused itself: the walk goes on (scheduler.py:1642-1664), at the next request
                continue
            i = next_index

    @property
    def _kv_len_cap(self) -> int:
        """max_model_len + k + L: the KV manager's max_seq_len (py_executor_creator.py adds the drafts and
        num_extra_kv_tokens), so a sequence near max_model_len still gets its drafts' and drafter's slots."""
        return self.cfg.max_model_len + self.k + self.lookahead

    def _admission_kv_tokens(self, req: Request, computed: int, grant: int) -> int:
        """The whole prompt (a paused request's too: its prompt took its outputs): a first context
        chunk's ``add_sequence`` (``KVCacheManager.prepare_resources``, kv_cache_manager C++ addSequence)."""
        return req.num_tokens - computed

    def _enqueue_waiting(self, req: Request, front: bool) -> None:
        """In arrival order: a paused request stays where it was in PyExecutor's active list."""
        self.waiting.insert(bisect.bisect(self.waiting, req.arrival, key=lambda r: r.arrival), req)

    def _pause(self, step: StepPass, victim: Request) -> None:
        """Pause ``victim`` (MAX_UTILIZATION): out of the running queue, its grant of this pass given back."""
        self.running.remove(victim)
        if victim.request_id in step.grants:
            step.record_refund(victim, unschedule=self.unschedules_refunded)
            if self.unschedules_refunded:
                step.scheduled_running.remove(victim)
        self._preempt(victim)
        step.preempted.append(victim.request_id)

    def _pick_victim(self) -> Request:
        """MAX_UTILIZATION's pause: the last started request in arrival order, the active list's
        order (scheduler.py:1651-1656), whichever of decode or context chunk it is."""
        return max(self.running, key=lambda r: r.arrival)

    def _progress_possible(self, step: StepPass) -> bool:
        """Budget left by the exit rule, and KV for some request's next step: a generation
        request's 1 + drafts (prepare_resources adds them all), a context's next token, the
        head of the waiting queue through the capacity policy's gate."""
        if not step.may_schedule():
            return False
        free, cfg = self.pool.num_free, self.cfg
        for req in self.running:
            if req.num_computed_tokens + 1 >= cfg.max_model_len:
                continue
            tokens = 1 + (req.num_draft_tokens if req.is_decoding else 0)
            slots = grant_rules.kv_slots_needed(req.num_computed_tokens, tokens, self.lookahead, self._kv_len_cap)
            if self.pool.blocks_needed(req, slots, []) <= free:
                return True
        if self.waiting and len(self.running) < self._admission_seq_cap():
            req = self.waiting[0]
            hits = self.pool.find_cached_prefix(req)
            slots = grant_rules.kv_slots_needed(len(hits) * cfg.block_size, 1, self.lookahead, self._kv_len_cap)
            return self.pool.blocks_needed(req, slots, hits) <= free and self._whole_sequence_fits(req, hits)
        return False
