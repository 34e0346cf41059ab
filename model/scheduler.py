"""Scheduler: the stateful reference scheduler, vLLM 0.32's pass with a pluggable budget policy.

One ``schedule()`` runs the RUNNING queue, then (unless it preempted) the WAITING
queue, spending the policy's budgets, and returns a StepRecord with the ledger.
``update_from_output`` applies sampled and accepted tokens, finishes requests and
proposes drafts for the next step.
"""
from __future__ import annotations

import bisect

from ..spec.records import RequestState, StepLimits, StepOutcome, StepRecord
from . import methods
from .config import BudgetConfig
from .decisions import admission, running_grant, scheduled_drafts
from .kv_pool import KVBlockPool
from .policy import BudgetPolicy
from .request import Request, Status
from .step_pass import StepPass


_QUEUE_STATUS = {
    Status.WAITING: "waiting",
    Status.PREEMPTED: "waiting",
    Status.RUNNING: "running",
    Status.FINISHED: "finished",
    Status.ABORTED: "aborted",
}


class Scheduler:
    def __init__(self, cfg: BudgetConfig, policy: BudgetPolicy, validate: bool = True) -> None:
        """Raises ConfigError when ``validate`` and the policy refuses cfg."""
        if validate:
            policy.validate(cfg)
        self.cfg = cfg
        self.policy = policy
        self.params = policy.params(cfg)
        self.k = cfg.num_speculative_tokens
        self.lookahead = policy.lookahead(cfg)
        self.pool = KVBlockPool(cfg.num_kv_blocks, cfg.block_size, cfg.enable_prefix_caching,
                                methods.drops_last_hit_block(policy.table, cfg.method))
        self.requests: dict[str, Request] = {}
        self.waiting: list[Request] = []
        self.running: list[Request] = []
        self.num_steps = 0
        self.limits = StepLimits(
            max_num_batched_tokens=cfg.max_num_batched_tokens,
            max_num_scheduled_tokens=int(policy.token_cap(self.params)),
            max_num_seqs=cfg.max_num_seqs,
            num_speculative_tokens=self.k,
            draft_slots=int(self.params.draft_slots),
            lookahead=self.lookahead,
            max_model_len=cfg.max_model_len,
            block_size=cfg.block_size,
            num_kv_blocks=cfg.num_kv_blocks,
        )

    # -- requests -------------------------------------------------------------------
    def add_request(
        self,
        request_id: str,
        prompt_len: int,
        max_tokens: int,
        priority: int = 0,
        prefix_group: str | None = None,
        prefix_len: int = 0,
    ) -> None:
        """Queue a request. Raises ValueError for a duplicate id or lengths the engine refuses."""
        if request_id in self.requests:
            raise ValueError(f"request id {request_id!r} was already added")
        if not 1 <= prompt_len < self.cfg.max_model_len:
            raise ValueError(
                f"request {request_id!r}: prompt_len must be 1..max_model_len-1 ({self.cfg.max_model_len - 1}), "
                f"got {prompt_len}"
            )
        if max_tokens < 1:
            raise ValueError(f"request {request_id!r}: max_tokens must be >= 1, got {max_tokens}")
        if not 0 <= prefix_len <= prompt_len:
            raise ValueError(f"request {request_id!r}: prefix_len must be 0..prompt_len, got {prefix_len}")
        req = Request(request_id, prompt_len, max_tokens, len(self.requests), priority, prefix_group, prefix_len)
        self.requests[request_id] = req
        self._enqueue_waiting(req, front=False)

    def abort_request(self, request_id: str) -> None:
        """Abort a live request (a finished one is left alone). KeyError for an unknown id."""
        req = self.requests[request_id]
        if req.is_finished:
            return
        (self.running if req.status is Status.RUNNING else self.waiting).remove(req)
        self.pool.free(req)
        req.status = Status.ABORTED

    def _enqueue_waiting(self, req: Request, front: bool) -> None:
        if self.cfg.scheduling_policy == "priority":
            keys = [(r.priority, r.arrival) for r in self.waiting]
            self.waiting.insert(bisect.bisect(keys, (req.priority, req.arrival)), req)
        elif front:
            self.waiting.insert(0, req)
        else:
            self.waiting.append(req)

    def _preempt(self, req: Request) -> None:
        self.pool.free(req)
        req.status = Status.PREEMPTED
        req.num_computed_tokens = 0
        req.num_draft_tokens = 0
        req.is_prefill_chunk = True
        req.num_preemptions += 1
        self._enqueue_waiting(req, front=True)

    # -- the pass -------------------------------------------------------------------
    def schedule(self) -> StepRecord:
        """Run one scheduling pass; computed tokens advance by the grants."""
        policy, params = self.policy, self.params
        num_decoding = sum(1 for r in self.running if not r.is_prefill_chunk)
        initial = policy.initial_budgets(params, num_decoding)
        step = StepPass(policy, params, initial)
        progress_possible = self._progress_possible(step)
        num_eligible = len(self.running) + len(self.waiting)
        threshold = self.cfg.long_prefill_token_threshold if num_eligible > 1 else 0

        self._schedule_running(step, threshold)
        if not step.preempted:
            self._schedule_waiting(step, threshold)

        for rid, grant in step.grants.items():
            req = self.requests[rid]
            req.num_computed_tokens += grant
            req.is_prefill_chunk = req.num_computed_tokens < req.num_tokens
            req.num_draft_tokens = 0
        record = StepRecord(
            step=self.num_steps,
            limits=self.limits,
            num_scheduled_tokens=step.grants,
            scheduled_draft_tokens=step.drafts,
            runner_rows=step.rows,
            computed_before=step.computed_before,
            num_tokens=step.num_tokens,
            padded=frozenset(step.padded),
            prefill=frozenset(step.prefill),
            preempted=tuple(step.preempted),
            running=tuple(r.request_id for r in self.running),
            waiting=tuple(r.request_id for r in self.waiting),
            kv_blocks_in_use=self.pool.num_in_use,
            block_tables={r.request_id: tuple(r.block_ids) for r in self.running},
            block_keys=self._shared_block_keys(),
            unserved_demand=self._unserved_demand(),
            initial_token_budget=initial.token,
            initial_input_budget=initial.input,
            ledger=tuple(step.ledger),
            progress_possible=progress_possible,
        )
        self.num_steps += 1
        return record

    def _schedule_running(self, step: StepPass, threshold: int) -> None:
        policy, cfg = self.policy, self.cfg
        stopped = False
        i = 0
        while i < len(self.running):
            req = self.running[i]
            bypass = policy.decodes_bypass_budget and req.is_decoding
            if not bypass and (stopped or not step.may_schedule()):
                if not policy.decodes_bypass_budget:
                    break
                stopped = True  # the engine stops visiting, but its worker still runs every decode
                i += 1
                continue
            pending = req.num_tokens_with_spec if policy.drafts_in_grant else req.num_tokens
            computed = req.num_computed_tokens
            grant = running_grant(policy, self.params, step.budgets, pending - computed, computed, threshold,
                                  cfg.max_model_len, bypass)
            if grant <= 0:
                i += 1
                continue
            num_drafts = scheduled_drafts(policy.drafts_in_grant, req.num_draft_tokens, computed, grant,
                                          req.num_tokens, req.is_decoding)
            # Drafts outside the grant (a FastDeploy decode) still write KV: reserve their slots too.
            kv_tokens = grant if policy.drafts_in_grant else grant + num_drafts
            slots = min(computed + kv_tokens + self.lookahead, cfg.max_model_len)
            scheduled = True
            while not self.pool.allocate(req, slots, []):
                victim = self._pick_victim()
                victim_index = self.running.index(victim)
                del self.running[victim_index]
                if victim_index < i:
                    i -= 1
                if victim.request_id in step.grants:
                    step.record_refund(victim)
                    step.scheduled_running.remove(victim)
                self._preempt(victim)
                step.preempted.append(victim.request_id)
                if victim is req:
                    scheduled = False
                    break
            if not scheduled:
                break
            self.pool.cache_full_blocks(req, min(req.num_computed_tokens + grant, req.num_tokens))
            step.record_grant(req, grant, num_drafts, padded=False)
            step.scheduled_running.append(req)
            step.prefill_scheduled |= req.is_prefill_chunk  # vLLM never clears it, even on a refund
            i += 1

    def _pick_victim(self) -> Request:
        if self.cfg.scheduling_policy == "priority":
            return max(self.running, key=lambda r: (r.priority, r.arrival))
        return self.running[-1]

    def _schedule_waiting(self, step: StepPass, threshold: int) -> None:
        policy, cfg, k = self.policy, self.cfg, self.k
        while self.waiting and step.may_schedule():
            if len(self.running) >= cfg.max_num_seqs:
                break
            req = self.waiting[0]
            hits = self.pool.find_cached_prefix(req) if req.num_computed_tokens == 0 else []
            computed = req.num_computed_tokens + len(hits) * cfg.block_size
            decision = admission(
                policy, self.params, step.budgets, req.num_tokens - computed, computed, threshold,
                cfg.max_model_len, k, step.prefill_scheduled,
                bool(step.scheduled_running), self.params.enable_chunked_prefill,
            )
            if decision.stop:
                break
            grant = decision.grant
            assert grant > 0, f"waiting loop granted {grant} with budgets {step.budgets}"
            slots = min(computed + grant + self.lookahead, cfg.max_model_len)
            if not self._whole_sequence_fits(req, hits) or not self.pool.allocate(req, slots, hits):
                break
            del self.waiting[0]
            self.running.append(req)
            req.status = Status.RUNNING
            req.num_computed_tokens = computed
            self.pool.cache_full_blocks(req, min(computed + grant, req.num_tokens))
            step.record_grant(req, grant, k if decision.padded else 0, decision.padded)

    def _whole_sequence_fits(self, req: Request, hits: list[int]) -> bool:
        """vLLM's admission gate (``scheduler_reserve_full_isl``, on by default): a waiting
        request is admitted only if the free blocks could hold its whole sequence so far
        (prompt and outputs, at most max_model_len), not only its first chunk."""
        whole = min(req.num_tokens, self.cfg.max_model_len)
        return self.pool.blocks_needed(req, whole, hits) <= self.pool.num_free

    def _shared_block_keys(self) -> dict[int, object]:
        """Content keys of the blocks more than one live request holds (prefix sharing)."""
        ref, keys = self.pool.ref_count, self.pool.key_of
        return {b: keys[b] for r in self.running for b in r.block_ids if ref[b] > 1}

    def _unserved_demand(self) -> int:
        """Tokens that queued requests still wanted after the pass (computed already advanced),
        counting waiting requests only while a sequence slot is free."""
        unserved = sum(max(0, r.num_tokens_with_spec - r.num_computed_tokens) for r in self.running)
        if len(self.running) < self.cfg.max_num_seqs:
            unserved += sum(r.num_tokens - r.num_computed_tokens for r in self.waiting)
        return unserved

    def _progress_possible(self, step: StepPass) -> bool:
        """Could some request take a token now: budget left, a sequence slot, KV for it?"""
        bypass = self.policy.decodes_bypass_budget
        if not step.may_schedule() and not (bypass and any(r.is_decoding for r in self.running)):
            return False
        free, cfg = self.pool.num_free, self.cfg
        for req in self.running:
            if req.num_computed_tokens + 1 >= cfg.max_model_len:
                continue
            slots = min(req.num_computed_tokens + 1 + self.lookahead, cfg.max_model_len)
            if self.pool.blocks_needed(req, slots, []) <= free:
                return True
        if self.waiting and len(self.running) < cfg.max_num_seqs and step.may_schedule():
            req = self.waiting[0]
            hits = self.pool.find_cached_prefix(req)
            slots = min(len(hits) * cfg.block_size + 1 + self.lookahead, cfg.max_model_len)
            return self.pool.blocks_needed(req, slots, hits) <= free and self._whole_sequence_fits(req, hits)
        return False

    # -- output ---------------------------------------------------------------------
    def update_from_output(self, record: StepRecord, accepted: dict[str, int] | None = None) -> StepOutcome:
        """Apply one step's model output: a sampled token for every request that finished
        its prompt or decoded, plus ``accepted[id]`` drafts (clipped to those scheduled;
        padded placeholders are never accepted). Finished requests free their blocks."""
        accepted = accepted or {}
        cfg, k = self.cfg, self.k
        for rid in record.num_scheduled_tokens:
            req = self.requests[rid]
            if req.status is not Status.RUNNING or req.is_prefill_chunk:
                continue
            drafts = record.scheduled_draft_tokens.get(rid, 0)
            taken = 0 if rid in record.padded else max(0, min(accepted.get(rid, 0), drafts))
            if self.policy.drafts_in_grant:
                # Rows the grant ran past the known tokens: the drafts, or fewer when a
                # padded admission was cut short (SPEC.md F1); the unaccepted ones roll back.
                draft_rows = record.computed_before[rid] + record.num_scheduled_tokens[rid] - record.num_tokens[rid]
                req.num_computed_tokens -= draft_rows - taken
            else:
                req.num_computed_tokens += taken
            room = min(req.max_tokens - req.num_output_tokens, cfg.max_model_len - req.num_tokens)
            req.num_output_tokens += min(1 + taken, room)
            if req.num_output_tokens >= req.max_tokens or req.num_tokens >= cfg.max_model_len:
                self.running.remove(req)
                self.pool.free(req)
                req.status = Status.FINISHED
                continue
            assert req.num_computed_tokens == req.num_tokens - 1, (rid, req.num_computed_tokens, req.num_tokens)
            req.num_draft_tokens = k
        touched = set(record.num_scheduled_tokens).union(record.preempted)
        return StepOutcome(
            step=record.step,
            requests={rid: self.request_state(rid) for rid in touched},
            preempted=frozenset(record.preempted),
        )

    def request_state(self, request_id: str) -> RequestState:
        """The observable state of one request."""
        r = self.requests[request_id]
        return RequestState(_QUEUE_STATUS[r.status], r.num_computed_tokens, r.num_output_tokens, r.max_tokens,
                            r.num_prompt_tokens)

    @property
    def has_unfinished(self) -> bool:
        return bool(self.running or self.waiting)
