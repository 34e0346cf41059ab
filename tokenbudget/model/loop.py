"""SchedulerLoop: what every engine's scheduling loop shares, and ``scheduler_for``."""
from __future__ import annotations

import bisect
from typing import ClassVar, Hashable, Optional

from ..spec.queue_ids import QueueIds
from ..spec.records import RequestState, StepLimits, StepOutcome, StepRecord, pass_record
from . import decisions, methods
from .config import BudgetConfig
from .kv_pool import KVBlockPool
from .physical_need import physical_need
from .policy import BudgetPolicy
from .request import Request, Status
from .step_pass import StepPass
from .waiting_snapshot import WaitingSnapshot


_QUEUE_STATUS = {
    Status.WAITING: "waiting",
    Status.PREEMPTED: "waiting",
    Status.RUNNING: "running",
    Status.FINISHED: "finished",
    Status.ABORTED: "aborted",
}


def _priority_order(req: Request) -> tuple[int, int]:
    return req.priority, req.arrival


def scheduler_for(cfg: BudgetConfig, policy: BudgetPolicy, validate: bool = True) -> "SchedulerLoop":
    """The reference scheduler of cfg under policy: its loop (``policy.loop``).
    Raises ConfigError when ``validate`` and the policy refuses cfg."""
    loop: type[SchedulerLoop] = policy.loop
    return loop(cfg, policy, validate)


class SchedulerLoop:
    """The shared state, bookkeeping and output handling of a scheduling loop; subclasses
    supply the step (``_schedule_step``) and ``_progress_possible``."""

    # The engine's facts the shared output handling and the physical need read; each loop sets the first.
    drafts_in_grant: ClassVar[bool]  # a decode's grant counts its scheduled drafts (its output rolls back the rejected)
    drafts_after_sampling: ClassVar[bool] = True  # a model drafter drafts (and writes KV) in the step that sampled
    # The engine's physical facts (``physical_need``), read from the loop class the model defines:
    decodes_run_decode_rows: ClassVar[bool] = False  # a decode runs its method's decode_rows whatever it was granted

    @classmethod
    def method_table(cls, version: Optional[str]) -> str:
        """The method table the engine runs at ``version`` (a key of ``methods.TABLES``)."""
        return methods.DEFAULT_TABLE

    def __init__(self, cfg: BudgetConfig, policy: BudgetPolicy, validate: bool = True) -> None:
        """Raises ConfigError when ``validate`` and the policy refuses cfg."""
        if validate:
            policy.validate(cfg)
        self.cfg = cfg
        self.policy = policy
        self.params = policy.params(cfg)
        self.k = cfg.num_speculative_tokens
        self.lookahead = policy.lookahead(cfg)  # what the loop reserves: the policy's word, under test
        self.need = need = physical_need(policy, cfg)  # what a step really writes and runs: the engine's
        self.pool = KVBlockPool(cfg.num_kv_blocks, cfg.block_size, cfg.enable_prefix_caching,
                                methods.drops_last_hit_block(need.table, cfg.method),
                                methods.hash_lookahead(need.table, cfg.method))
        self.requests: dict[str, Request] = {}
        self.waiting: list[Request] = []
        self.running: list[Request] = []
        self.waiting_snapshot = WaitingSnapshot()
        self.num_steps = 0
        self.state_changes = 0  # adds, aborts and passes that changed something: the fingerprint's count
        self.aborted_in_step: list[str] = []  # requests the engine itself aborted in the last pass
        self.limits = StepLimits(
            max_num_batched_tokens=cfg.max_num_batched_tokens,
            max_num_scheduled_tokens=int(policy.token_cap(self.params)),
            max_num_seqs=cfg.max_num_seqs,
            num_speculative_tokens=self.k,
            draft_slots=int(need.draft_slots),
            lookahead=int(need.lookahead),
            max_model_len=cfg.max_model_len,
            block_size=cfg.block_size,
            num_kv_blocks=cfg.num_kv_blocks,
            method=cfg.method,
            reserved_lookahead=self.lookahead,
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
        self.state_changes += 1
        self._enqueue_waiting(req, front=False)

    def abort_request(self, request_id: str) -> None:
        """Abort a live request (a finished one is left alone). KeyError for an unknown id."""
        req = self.requests[request_id]
        if req.is_finished:
            return
        (self.running if req.status is Status.RUNNING else self.waiting).remove(req)
        self.pool.free(req)
        req.status = Status.ABORTED
        self.state_changes += 1

    def _enqueue_waiting(self, req: Request, front: bool) -> None:
        if self.cfg.scheduling_policy == "priority":  # the queue is kept in (priority, arrival) order
            self.waiting.insert(bisect.bisect(self.waiting, (req.priority, req.arrival), key=_priority_order), req)
        elif front:
            self.waiting.insert(0, req)
        else:
            self.waiting.append(req)

    def _preempt(self, req: Request, front: bool = True) -> None:
        """Free req's KV and send it back to wait, to be recomputed from scratch: at the
        front of the waiting queue (vLLM), or at its back (``front`` off: SGLang's retraction)."""
        self.pool.free(req)
        req.status = Status.PREEMPTED
        req.num_computed_tokens = 0
        req.num_draft_tokens = 0
        req.is_prefill_chunk = True
        req.num_preemptions += 1
        self._enqueue_waiting(req, front=front)

    # -- the pass -------------------------------------------------------------------
    def schedule(self) -> StepRecord:
        """Run one scheduling step (``_schedule_step``); computed tokens advance by the grants."""
        policy, params = self.policy, self.params
        fingerprint = self.fingerprint()
        self.aborted_in_step = []
        num_decoding = sum(1 for r in self.running if not r.is_prefill_chunk)
        initial = policy.initial_budgets(params, num_decoding)
        step = StepPass(policy, params, initial, self.need)
        progress_possible = self._progress_possible(step)
        self._schedule_step(step)

        for rid, grant in step.grants.items():
            req = self.requests[rid]
            req.num_computed_tokens += grant
            req.is_prefill_chunk = req.num_computed_tokens < req.num_tokens
            req.num_draft_tokens = 0
        if step.grants or step.preempted or self.aborted_in_step:
            self.state_changes += 1
        waiting = self.waiting_ids()
        record = pass_record(
            self.num_steps, self.limits, step.grants, step.drafts, step.rows, step.computed_before, step.num_tokens,
            step.prefill, step.preempted, [r.request_id for r in self.running], waiting, self.pool.num_in_use,
            {r.request_id: r.block_table() for r in self.running}, self._shared_block_keys(), padded=step.padded,
            paused=step.paused, unserved_demand=self._unserved_demand(), initial_token_budget=initial.token,
            initial_input_budget=initial.input, ledger=step.ledger, progress_possible=progress_possible,
            fingerprint=fingerprint,
        )
        self.num_steps += 1
        return record

    def fingerprint(self) -> Hashable:
        """The state as a value, in O(1): how many adds, aborts and passes changed it so far,
        then the loop's own counters (``_loop_state``). The requests, queues and KV pool change
        only by an add, an abort, or a pass that granted, preempted or aborted (``update_from_output``
        touches only the requests the pass granted; the budgets and pauses of a pass are
        functions of that state, and policies and loop hooks are functions of their inputs),
        so two equal fingerprints mean the same state (``tests/unit/test_fixpoint.py`` pins
        it against a snapshot of the whole state on every loop). A plain int where the loop
        keeps nothing of its own: a run's records hold one each."""
        own = self._loop_state()
        return (self.state_changes, *own) if own else self.state_changes

    def _loop_state(self) -> tuple[object, ...]:
        """What a loop keeps beyond the requests, the queues and the pool (none here)."""
        return ()

    def waiting_ids(self) -> QueueIds:
        """The waiting queue's ids as it stands, read at the cost of what changed in it since
        they were last read (``WaitingSnapshot``, whose summed demand is then the queue's too)."""
        self.waiting_snapshot.update(self.waiting)
        return self.waiting_snapshot.ids

    def _schedule_step(self, step: StepPass) -> None:
        """The engine's step: grant, preempt and admit into ``step`` (the step's ledger)."""
        raise NotImplementedError

    def _progress_possible(self, step: StepPass) -> bool:
        """Could some request take a token at the start of the step?"""
        raise NotImplementedError

    def _caches_blocks_at_output(self) -> bool:
        """Whether a decode's output publishes the blocks its new tokens complete (else the
        next pass that visits the request does)."""
        return False

    keeps_output = False  # ``_output_kept`` is called for each request that stays running after its output

    def _release_finished(self, req: Request) -> None:
        """A request that wrote its last token gives its KV back."""
        self.pool.free(req)

    def _output_kept(self, req: Request, computed_before: int) -> None:
        """A request stays running after this step's output (called only with ``keeps_output``)."""

    def _stop_cuts_computed(self) -> bool:
        """Whether a stop that cuts output tokens (``max_tokens`` or ``max_model_len`` reached
        before the last accepted one) takes them off the computed count too."""
        return False


    def _shared_block_keys(self) -> dict[int, object]:
        """Content keys of the blocks more than one live request holds (prefix sharing)."""
        keys = self.pool.key_of
        return {b: keys.get(b) for b in self.pool.shared}

    def _unserved_demand(self) -> int:
        """``decisions.unserved_total`` of the queues; the waiting queue's sum is kept from step
        to step (``WaitingSnapshot``), so a long queue costs what changed in it."""
        wanted_running = 0
        running_demand = decisions.running_demand
        for r in self.running:
            wanted_running += running_demand(r.num_tokens, r.num_draft_tokens, r.num_computed_tokens)
        return decisions.unserved_total(  # type: ignore[no-any-return]
            self.cfg.max_num_seqs, len(self.running), wanted_running, self.waiting_snapshot.demand)

    # -- output ---------------------------------------------------------------------
    def update_from_output(self, record: StepRecord, accepted: dict[str, int] | None = None) -> StepOutcome:
        """Apply one step's model output: a sampled token for every request that finished
        its prompt or decoded, plus ``accepted[id]`` drafts (clipped to those scheduled;
        padded placeholders are never accepted). Finished requests free their blocks."""
        accepted = accepted or {}
        k, max_model_len, requests = self.k, self.cfg.max_model_len, self.requests
        drafts_in_grant = self.drafts_in_grant
        padded, drafts, computed_before, num_tokens = (record.padded, record.scheduled_draft_tokens,
                                                       record.computed_before, record.num_tokens)
        stop_cuts_computed, caches_blocks = self._stop_cuts_computed(), self._caches_blocks_at_output()
        keeps_output = self.keeps_output
        for rid, grant in record.num_scheduled_tokens.items():
            req = requests[rid]
            if req.status is not Status.RUNNING or req.is_prefill_chunk:
                continue
            taken = decisions.accepted_drafts(rid in padded, accepted.get(rid, 0), drafts.get(rid, 0))
            req.num_computed_tokens = decisions.computed_after_output(
                drafts_in_grant, req.num_computed_tokens, computed_before[rid], grant, num_tokens[rid], taken)
            room = min(req.max_tokens - req.num_output_tokens, max_model_len - req.num_tokens)
            kept = min(1 + taken, room)
            req.num_output_tokens += kept
            if stop_cuts_computed:
                req.num_computed_tokens -= 1 + taken - kept
            if caches_blocks:
                self.pool.cache_full_blocks(req, req.num_computed_tokens)
            if req.num_output_tokens >= req.max_tokens or req.num_tokens >= max_model_len:
                self.running.remove(req)
                self._release_finished(req)
                req.status = Status.FINISHED
                continue
            assert req.num_computed_tokens == req.num_tokens - 1, (rid, req.num_computed_tokens, req.num_tokens)
            req.num_draft_tokens = k
            if keeps_output:
                self._output_kept(req, computed_before[rid])
        touched = set(record.num_scheduled_tokens).union(record.preempted, self.aborted_in_step)
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
