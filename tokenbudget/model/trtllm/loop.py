"""TrtllmLoop: TensorRT-LLM's scheduling step on the PyTorch backend, capacity scheduler
then micro-batch scheduler (tensorrt_llm/_torch/pyexecutor/scheduler/scheduler.py,
NVIDIA/TensorRT-LLM at 002f3cc3d, cited by function: SPEC.md §9 says why not by line)."""
from __future__ import annotations

import bisect
from typing import Optional

from .. import decisions
from .chunking import Context, aligned_chunk, kept_drafts
from .deployments import GUARANTEED_NO_EVICT, MAX_REQUESTS, MAX_UTILIZATION, capacity_of
from ...spec.intlike import cdiv
from ..one_pass_loop import OnePassLoop
from ..request import Request, Status
from ...spec import grant_rules
from ..step_pass import StepPass
from ...spec.records import StepOutcome, StepRecord


class OutOfBlocks(RuntimeError):
    """TensorRT-LLM's KV manager has no free block where the executor adds tokens (SPEC.md §9, T1 and T2)."""


class TrtllmLoop(OnePassLoop):
    drafts_in_grant = False
    pads_short_admissions = False
    decodes_bypass_budget = False
    applies_long_prefill_threshold = False
    # The micro-batch walk grants through ``decisions.running_grant`` and checks the exit rule
    # itself; pauses happen in the capacity pass, before any grant: so no victim was granted in
    # the pass, and unschedules_refunded is never read either.
    honours = frozenset({"admission", "waiting_checks_exit_rule"})
    decodes_run_decode_rows = True  # the forward runs 1 + k rows of a generation request, whatever was charged
    skeleton_follows = False  # the capacity pass before the chunks (``_schedule_waiting``) is its own

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        # Paused requests' placeholder drafts, which LlmRequest::pause leaves on them (SPEC.md §9, T3): a
        # context carries them to its last chunk; the KV its first chunk took for them (``stale_kv``) stays
        # past computed + L until its first generation step's rewind.
        self.stale_drafts: dict[str, int] = {}
        self.stale_kv: dict[str, int] = {}
        self.ran_as_generation: set[str] = set()  # the last pass's generation requests, for its output

    @classmethod
    def method_table(cls, version: Optional[str]) -> str:
        return "trtllm"

    def _schedule_step(self, step: StepPass) -> None:
        """The capacity pass, then the running pass and the waiting pass over what it let through.
        MAX_UTILIZATION's capacity pass walks every active request first and pauses there
        (``_max_utilization_walk``); the other policies gate only the waiting contexts."""
        scheduled = None
        if self.capacity == MAX_UTILIZATION:
            scheduled, paused = self._max_utilization_walk()
            for victim in paused:
                self._pause(step, victim)
        contexts = [r for r in sorted(self.running + self.waiting, key=lambda r: r.arrival)
                    if not r.is_decoding and (scheduled is None or r.request_id in scheduled)]
        first_chunks = {r.request_id for r in contexts if r.status is not Status.RUNNING}
        self._schedule_running(step, 0, scheduled)
        self._schedule_waiting(step, 0, scheduled)
        if self.stale_drafts:
            self._run_stale_drafts(step, contexts, first_chunks)
        self.ran_as_generation = {rid for rid, decode in step.charged_as_decode.items() if decode}

    def _run_stale_drafts(self, step: StepPass, collected: list[Request], first_chunks: set[str]) -> None:
        """The drafts a context still carries run with its last chunk: all when every context the micro-batch
        collected (``collected``, granted or not; ``first_chunks`` were waiting) fits with its whole remainder and drafts in what the
        generation requests left (scheduler.py:978-990, 1029-1032), else what ``_fit_draft_tokens`` keeps
        (1289-1328), the rest discarded for good; a first chunk's KV takes the drafts it carries then
        (``prepare_resources``). Charged as a context's compute only."""
        cfg = self.cfg
        contexts = [r.request_id for r in collected]
        remaining = {r.request_id: step.num_tokens[r.request_id] - step.computed_before[r.request_id]
                     if r.request_id in step.grants else r.num_tokens - r.num_computed_tokens for r in collected}
        carried = {rid: self.stale_drafts.get(rid, 0) for rid in contexts}
        capacity = cfg.max_num_batched_tokens - sum(
            int(self.policy.charge(self.params, grant, True).token)
            for rid, grant in step.grants.items() if step.charged_as_decode[rid])
        kept = dict(carried)
        if cfg.enable_chunked_prefill and sum(remaining[r] + carried[r] for r in contexts) > capacity:
            ctxs = [Context(remaining[r], 0, carried[r]) for r in contexts]
            kept = dict(zip(contexts, kept_drafts(ctxs, [step.grants.get(r, 0) for r in contexts], capacity,
                                                  cfg.block_size, None)))
        for rid in contexts:
            if not carried[rid] or rid not in step.grants:
                continue
            last = step.grants[rid] >= remaining[rid]
            if rid in first_chunks:  # its prefix hits, if any, are computed already
                req = self.requests[rid]
                drafts = kept[rid] if last else carried[rid]
                slots = min(req.num_tokens + self.lookahead + drafts, self._kv_len_cap)
                if not self.pool.allocate(req, slots, []):
                    raise self._out_of_blocks(req, slots)
                self.stale_kv[rid] = drafts
            if last:  # the stamp replaces what is left of them at its first generation step
                del self.stale_drafts[rid]
                step.drafts[rid] = kept[rid]
                step.rows[rid] += kept[rid]
                if kept[rid]:
                    step.prefill.add(rid)  # a context chunk, though it may be one token long

    def _max_utilization_walk(self) -> tuple[set[str], list[Request]]:
        """MaxUtilizationPolicy.schedule (scheduler.py:1580-1677): in the active list's order, a request
        whose one-step need fits the free blocks less those counted before it is let through; else the
        last started request at or after it is paused, its blocks free, the walk ended before it; with
        none started the walk stops. Returns the ids let through and the requests paused, in order."""
        active = sorted(self.running + self.waiting, key=lambda r: r.arrival)
        free, counted, end, index = self.pool.num_free, 0, len(active), 0
        scheduled: set[str] = set()
        paused: list[Request] = []
        while index < end:
            req = active[index]
            need = self._needed_one_step(req)
            if len(scheduled) < self.cfg.max_num_seqs and counted + need <= free:  # scheduler.py:1698, 1783-1791
                scheduled.add(req.request_id)
                counted += need
                index += 1
                continue
            started = next((i for i in range(end - 1, index - 1, -1) if active[i].status is Status.RUNNING), None)
            if started is None:
                break
            paused.append(active[started])  # scheduling_remove_sequence (scheduler.py:1671)
            free += len(active[started].block_ids)
            end = started
        return scheduled, paused

    def _needed_one_step(self, req: Request) -> int:
        """getNeededBlocksOneStep (kvCacheManager.cpp), no lookahead of two steps: a first context chunk
        its prompt's blocks and the drafts it carries (up to max_new_tokens); a generation request the
        blocks its next 1 + D tokens add to the KV it holds (computed + L, and drafts a context carried),
        those capped at what max_new_tokens leaves, none past the window max_model_len + L; a later
        context chunk none. Negative when the cap falls a block short."""
        cfg, block = self.cfg, self.cfg.block_size
        window = cfg.max_model_len + self.lookahead
        end = self._sequence_end(req)
        if req.status is not Status.RUNNING:
            drafts = min(self.stale_drafts.get(req.request_id, 0), end - req.num_tokens)
            return cdiv(min(req.num_tokens + drafts, window), block)
        if not req.is_decoding:
            return 0
        current = req.num_computed_tokens + self.lookahead + self.stale_kv.get(req.request_id, 0)
        following = current + min(1 + self._stamped_drafts, end - current)
        if following > window:
            return 0
        return cdiv(following, block) - cdiv(current, block)

    @property
    def _stamped_drafts(self) -> int:
        """D, the placeholder drafts PyExecutor stamps on a generation request before scheduling."""
        return int(self.policy.scheduled_drafts(self.params))

    def _schedule_waiting(self, step: StepPass, threshold: int, scheduled: Optional[set[str]] = None) -> None:
        """The waiting contexts the capacity pass lets through (``scheduled``, else ``_capacity_pass``),
        then their chunks (scheduler.py:2246-2253): in order, each the shared decision with its chunk
        aligned to the block size; one aligned to nothing is passed over (``_chunk_fcfs`` sizes every
        context, scheduler.py:1219-1259), an unchunked one that does not fit ends them. KV that is not
        there for a first chunk is the KV manager's throw (``OutOfBlocks``)."""
        admitted = (self._capacity_pass() if scheduled is None
                    else [r for r in self.waiting if r.request_id in scheduled])
        cfg, serving = self.cfg, True
        for req in admitted:
            serving = serving and (step.may_schedule() or not self.waiting_checks_exit_rule)
            if not serving:
                break
            hits = self.pool.find_cached_prefix(req) if req.num_computed_tokens == 0 else []  # after the pauses
            computed = req.num_computed_tokens + len(hits) * cfg.block_size
            demand = req.num_tokens - computed
            drafts = 0 if cfg.enable_chunked_prefill else self.stale_drafts.get(req.request_id, 0)
            decision = self.admission(self.policy, self.params, step.budgets, demand + drafts, computed, threshold,
                                      cfg.max_model_len, self.k, step.prefill_scheduled,
                                      bool(step.scheduled_running), self.params.enable_chunked_prefill)
            if decision.stop:
                break
            grant = demand if drafts else int(aligned_chunk(decision.grant, demand, cfg.block_size))  # sch 1249-1251
            if grant <= 0:
                continue
            slots = grant_rules.kv_slots_needed(computed, self._admission_kv_tokens(req, computed, grant),
                                                self.lookahead, self._kv_len_cap)
            if not self.pool.allocate(req, slots, hits):
                raise self._out_of_blocks(req, slots)  # prepare_resources' add_sequence (resource_manager.py)
            self.waiting.remove(req)
            self.running.append(req)
            req.status = Status.RUNNING
            req.num_computed_tokens = computed
            self.pool.cache_full_blocks(req, min(computed + grant, req.num_tokens))
            step.record_grant(req, grant, 0, False, drafts)  # unchunked: prompt + drafts (scheduler.py:953-969)

    def _capacity_pass(self) -> list[Request]:
        """The waiting contexts GUARANTEED_NO_EVICT (or MAX_REQUESTS) lets through, in arrival order up
        to max_num_seqs with the running ones, until one does not fit (scheduler.py:1430-1561)."""
        admitted: list[Request] = []
        reserved = 0
        for req in self.waiting:
            if len(self.running) + len(admitted) >= self._admission_seq_cap():
                break
            hits = self.pool.find_cached_prefix(req) if req.num_computed_tokens == 0 else []
            if not self._whole_sequence_fits(req, hits, reserved):
                break
            admitted.append(req)
            reserved += self._counted_by_capacity(req)
        return admitted

    @property
    def capacity(self) -> str:
        """The capacity policy of the deployment modelled (``deployments``)."""
        return capacity_of(self.cfg.engine_version)

    def _blocks_to_completion(self, req: Request) -> int:
        """getRemainingBlocksToCompletion at beam width 1 (kvCacheManager.cpp): the blocks of
        prompt + max_new_tokens (clipped to max_model_len) less those held; negative when the
        request holds more (its drafts' and the drafter's slots past the end)."""
        return cdiv(self._sequence_end(req), self.cfg.block_size) - len(req.block_ids)

    def _sequence_end(self, req: Request) -> int:
        """The request's prompt_len + max_new_tokens, as the engine sees it: max_tokens clipped to
        max_model_len (llm.py ``_check_arguments``); a pause moves tokens between the two, not the sum."""
        return min(req.num_prompt_tokens + req.max_tokens, self.cfg.max_model_len)

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

    def _counted_by_capacity(self, req: Request) -> int:
        """What GUARANTEED_NO_EVICT counts for a context it lets through: its blocks to completion."""
        return self._blocks_to_completion(req) if self.capacity == GUARANTEED_NO_EVICT else 0

    def schedule(self) -> StepRecord:
        record = super().schedule()
        self._decodes_first()
        return record

    def update_from_output(self, record: StepRecord, accepted: dict[str, int] | None = None) -> StepOutcome:
        generation = self.ran_as_generation
        if accepted:  # a context's last chunk samples one token: the drafts it carries are placeholders
            accepted = {rid: n for rid, n in accepted.items() if rid in generation}
        outcome = super().update_from_output(record, accepted)
        for req in self.running:  # rewind_kv_cache: a generation request keeps its committed KV and L
            if req.request_id in generation:
                self.pool.free_tail(req, cdiv(req.num_computed_tokens + self.lookahead, self.cfg.block_size))
                self.stale_kv.pop(req.request_id, None)
        for stale in (self.stale_drafts, self.stale_kv):
            for rid in [rid for rid in stale if self.requests[rid].is_finished]:
                del stale[rid]
        self._decodes_first()
        return outcome

    def _decodes_first(self) -> None:
        """Generation requests ahead of context chunks, each group in queue order: the order
        in which the micro-batch scheduler charges them."""
        self.running.sort(key=lambda r: not r.is_decoding)

    def _schedule_running(self, step: StepPass, threshold: int, scheduled: Optional[set[str]] = None) -> None:
        """The started requests the capacity pass let through (every one without ``scheduled``), charged
        in the micro-batch's order; KV that is not there for one is the KV manager's throw."""
        policy, cfg = self.policy, self.cfg
        i = 0
        while i < len(self.running):
            if not step.may_schedule():
                break
            req = self.running[i]
            if scheduled is not None and req.request_id not in scheduled:
                i += 1
                continue
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
            carried = self.stale_kv.get(req.request_id, 0) if req.is_decoding else 0
            next_index = self._grant_running(step, i, grant, num_drafts, kv_tokens=grant + num_drafts + carried)
            assert next_index is not None, "TensorRT-LLM pauses only in its capacity pass"
            i = next_index

    @property
    def _kv_len_cap(self) -> int:
        """What ``add_token`` lets a sequence reach, with no cap of its own: max_model_len + k + L (the KV
        manager's max_seq_len, py_executor_creator.py adds the drafts and num_extra_kv_tokens), and k more
        at the first generation step after a re-prefill whose first chunk took its placeholder drafts (T3)."""
        return self.cfg.max_model_len + 2 * self.k + self.lookahead

    def _admission_kv_tokens(self, req: Request, computed: int, grant: int) -> int:
        """The whole prompt (a paused request's too: its prompt took its outputs): a first context
        chunk's ``add_sequence`` (``KVCacheManager.prepare_resources``, kv_cache_manager C++ addSequence)."""
        return req.num_tokens - computed

    def _enqueue_waiting(self, req: Request, front: bool) -> None:
        """In arrival order: a paused request stays where it was in PyExecutor's active list."""
        self.waiting.insert(bisect.bisect(self.waiting, req.arrival, key=lambda r: r.arrival), req)

    def _pause(self, step: StepPass, victim: Request) -> None:
        """Pause ``victim`` (MAX_UTILIZATION): out of the running queue, its KV freed; a generation request
        keeps the drafts stamped on it."""
        assert victim.request_id not in step.grants, "the capacity pass pauses before any grant"
        if victim.is_decoding and self._stamped_drafts:
            self.stale_drafts[victim.request_id] = self._stamped_drafts
        self.stale_kv.pop(victim.request_id, None)
        self.running.remove(victim)
        self._preempt(victim)
        step.preempted.append(victim.request_id)

    def _pick_victim(self) -> Request:
        """Never: the capacity pass paused what it pauses, so KV that is not there when a request runs
        is the KV manager's throw in ``prepare_resources`` (``add_token``, kvCacheManager.cpp)."""
        raise self._out_of_blocks(None, 0)

    def _out_of_blocks(self, req: Optional[Request], slots: int) -> "OutOfBlocks":
        """The C++ KV manager's error when a block is wanted and none is free (BlockManager::getFreeBlock)."""
        wanted = f"request {req.request_id} needs {self.pool.blocks_needed(req, slots, [])}, " if req else ""
        return OutOfBlocks(f"Can't allocate new blocks. No free blocks left ({wanted}{self.pool.num_free} free)")

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
