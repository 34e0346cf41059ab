"""FastDeployLoop: FastDeploy's scheduling pass, ``ResourceManagerV1.schedule``
(fastdeploy/engine/sched/resource_manager_v1.py, cited at #7623's merge, 2a606e361)."""
from __future__ import annotations

from typing import Optional

from ...spec import grant_rules
from ...spec.records import StepOutcome, StepRecord
from .. import decisions
from . import commits as commits
from . import worker as worker
from ..one_pass_loop import OnePassLoop
from ..request import Request, Status
from ..step_pass import StepPass


class FastDeployLoop(OnePassLoop):
    drafts_in_grant = False
    pads_short_admissions = False
    decodes_bypass_budget = True
    applies_long_prefill_threshold = False
    # FCFS only: the victim is the tail, which the running pass has not granted yet, so
    # unschedules_refunded is never read.
    honours = OnePassLoop.honours - {"unschedules_refunded"}
    decodes_run_decode_rows = True  # the worker runs 1 + k rows of a decode granted 1

    @classmethod
    def method_table(cls, version: Optional[str]) -> str:
        return "fastdeploy"

    @classmethod
    def longest_prompt(cls, cfg: BudgetConfig) -> int:
        """With a commit, prompt + min_tokens (1 by default) < max_model_len, or the engine
        refuses the request; the paged pool of SPEC.md §5 takes max_model_len - 1."""
        if cfg.engine_version is None:
            return super().longest_prompt(cfg)
        return cfg.max_model_len - 2  # engine.py:307, entrypoints/engine_client.py:384 (564c78d78)

    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self.commit = commits.commit_row(self.cfg.engine_version)  # None: the paged pool of SPEC.md §5
        self.worker_paused: set[str] = set()  # decodes the worker paused (is_block_step), kept across steps
        self.reserve_float = float(commits.RESERVE_BLOCKS)  # current_reserve_output_block_num_float
        self.reserve = commits.RESERVE_BLOCKS
        self.relaxed = True  # can_relax_prefill_strategy (True at start, resource_manager_v1.py:247)
        self.ratio = commits.RATIO_INIT  # new_token_ratio (#7498)
        self.chunk_waits = False  # a running chunk did not fit this pass (#7498): no waiting pass
        self.has_task = False  # the pass gave FastDeploy's batch a task (len(batch_request) > 0)
        self.max_blocks = self.cfg.max_model_len // self.cfg.block_size  # max_block_num_per_seq (config.py:2117)

    def _loop_state(self) -> tuple[object, ...]:
        if self.commit is None:
            return ()
        return self.reserve_float, self.relaxed, self.ratio, tuple(sorted(self.worker_paused))

    def schedule(self) -> StepRecord:
        if self.commit is None:
            return super().schedule()
        record = super().schedule()
        if self.has_task and self.commit.token_ratio_reserve:  # :1209-1215 at 564c78d78
            self.ratio = max(self.ratio - commits.RATIO_DECAY, commits.RATIO_MIN)
        elif self.has_task:  # resource_manager_v1.py:1131-1139 at 2a606e361
            self.reserve_float -= commits.RESERVE_DECAY
            self.reserve = max(int(self.reserve_float), commits.RESERVE_MIN, 0)
            if self.reserve == 0:
                self.relaxed = True
        self.has_task = self.chunk_waits = False  # the pass's own: nothing of them is left for the next
        return record

    def update_from_output(self, record: StepRecord, accepted: dict[str, int] | None = None) -> StepOutcome:
        outcome = super().update_from_output(record, accepted)
        if self.commit is not None:  # the worker's pause test after the step (fastdeploy_worker)
            cfg, paused = self.cfg, self.worker_paused
            paused.intersection_update(r.request_id for r in self.running)
            for r in self.running:
                if r.is_decoding and worker.decode_pauses(r.num_tokens - 1, len(r.block_ids), self.k,
                                                          cfg.block_size, cfg.max_model_len):
                    paused.add(r.request_id)
        return outcome

    def _schedule_running(self, step: StepPass, threshold: int) -> None:
        if self.commit is not None:
            self._schedule_running_blocks(step)
            return
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

    def _schedule_waiting(self, step: StepPass, threshold: int) -> None:
        if self.commit is not None:
            if not self.chunk_waits:
                self._schedule_waiting_blocks(step)
            return
        super()._schedule_waiting(step, threshold)

    # -- a commit's block rules (fastdeploy_commits) ------------------------------------
    def _schedule_running_blocks(self, step: StepPass) -> None:
        """The running loop of ``schedule()`` (resource_manager_v1.py:809-957 at 2a606e361):
        while the budget is above 0, a decode with few free slots gets 2 blocks and a prefill
        chunk its blocks, preempting the tail when the pool lacks them; a preemption of the
        request itself ends the loop. Then every decode not paused runs (the worker)."""
        assert self.commit is not None
        cfg, block, k = self.cfg, self.cfg.block_size, self.k
        speculative = cfg.method is not None and k > 0
        prealloc = self.commit.prealloc_threshold(k, block)
        i = 0
        while i < len(self.running) and step.may_schedule():
            req = self.running[i]
            held = len(req.block_ids)
            if req.is_decoding:
                if held * block - req.num_tokens <= prealloc:
                    if not self._take_blocks(step, req, commits.ENC_DEC_BLOCK_NUM):
                        break
                    self.worker_paused.discard(req.request_id)  # a decode task: recover_decode_task
                if req.request_id in self.worker_paused:  # charged (43685a98a: 1, :841), runs nothing
                    step.paused.append(req.request_id)
                    step.budgets = self.policy.spend(step.budgets, self.policy.charge(self.params, 1, True), -1)
                else:
                    step.record_grant(req, 1, req.num_draft_tokens, padded=False)
                    step.scheduled_running.append(req)
            else:
                grant = step.grant_for(req.num_tokens - req.num_computed_tokens)
                if grant <= 0:
                    i += 1
                    continue
                n = commits.new_blocks(req.num_computed_tokens, grant, held, block, self.max_blocks, speculative)
                if self.commit.token_ratio_reserve:  # #7498: the chunk waits for the admission threshold
                    if self.pool.num_free < self._admission_blocks(n, speculative):
                        self.chunk_waits = True
                        break
                    self._allocate(req, n)
                elif not self._take_blocks(step, req, n):
                    break
                step.record_grant(req, grant, 0, padded=False)
                step.scheduled_running.append(req)
            i += 1
        for req in self.running:  # the worker runs every decode the loop did not reach, unless paused
            if not req.is_decoding or req.request_id in step.grants or req.request_id in step.paused:
                continue
            if req.request_id in self.worker_paused:
                step.paused.append(req.request_id)
                continue
            step.record_grant(req, 1, req.num_draft_tokens, padded=False)
            step.scheduled_running.append(req)

    def _take_blocks(self, step: StepPass, req: Request, n: int) -> bool:
        """Give req ``n`` more blocks, preempting the tail of the running list while the pool
        lacks them (``_trigger_preempt``, :387-443); False when req preempted itself."""
        assert self.commit is not None
        ratio_reserve = self.commit.token_ratio_reserve
        if self.pool.num_free < n and not ratio_reserve:
            self.reserve_float, self.reserve = float(commits.RESERVE_BLOCKS), commits.RESERVE_BLOCKS
            self.relaxed = False
        while self.pool.num_free < n:
            if ratio_reserve:  # the last request that has decoded (_select_preempt_candidate)
                index = next((j for j in range(len(self.running) - 1, -1, -1) if self.running[j].is_decoding), None)
            else:
                index = len(self.running) - 1 if self.running else None
            if index is None:
                return False
            victim = self.running.pop(index)
            self.worker_paused.discard(victim.request_id)
            self._preempt(victim)
            step.preempted.append(victim.request_id)
            self.has_task = True
            if ratio_reserve:
                self._reset_ratio()
            if victim is req:
                return False
        self._allocate(req, n)
        return True

    def _allocate(self, req: Request, n: int) -> None:
        if n > 0:
            assert self.pool.allocate(req, (len(req.block_ids) + n) * self.cfg.block_size, [])
        self.has_task = True

    def _reset_ratio(self) -> None:
        running = self.running
        self.ratio = commits.ratio_after_preemption(
            sum(r.num_output_tokens for r in running), sum(r.max_tokens for r in running),
            sum(1 for r in running if r.is_decoding), self.cfg.block_size, len(running))

    def _admission_blocks(self, chunk_blocks: int, speculative: bool) -> int:
        """The free blocks a chunk needs to be admitted (``_get_can_schedule_prefill_threshold_block``)."""
        assert self.commit is not None
        if self.commit.token_ratio_reserve:
            block, ratio = self.cfg.block_size, self.ratio
            reserved = sum(commits.ratio_reserve_blocks(r.max_tokens, r.num_output_tokens, ratio, block)
                           for r in self.running)
            return commits.ratio_admission_blocks(chunk_blocks, reserved, self.max_blocks, speculative)
        return commits.admission_blocks(chunk_blocks, len(self.running), self.reserve, self.relaxed, self.max_blocks,
                                        speculative)

    def _schedule_waiting_blocks(self, step: StepPass) -> None:
        """The waiting loop (:962-1116 at 2a606e361): while the budget is above 0 and fewer than
        max_num_seqs requests run or wait preempted, admit the head if the free blocks cover
        its chunk's blocks and the output reserve; stop at the first that does not fit."""
        cfg, block, k = self.cfg, self.cfg.block_size, self.k
        speculative = cfg.method is not None and k > 0
        while self.waiting and step.may_schedule():
            seats = len(self.running) + sum(1 for r in self.waiting if r.status is Status.PREEMPTED)
            if seats >= cfg.max_num_seqs:
                break
            req = self.waiting[0]
            grant = step.grant_for(req.num_tokens - req.num_computed_tokens)
            if grant <= 0:
                break
            n = commits.new_blocks(req.num_computed_tokens, grant, len(req.block_ids), block, self.max_blocks,
                                   speculative)
            if self.pool.num_free < self._admission_blocks(n, speculative):
                break
            self._allocate(req, n)
            del self.waiting[0]
            self.running.append(req)
            req.status = Status.RUNNING
            step.record_grant(req, grant, 0, padded=False)
            self.has_task = True

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
