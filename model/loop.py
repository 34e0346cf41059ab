"""SchedulerLoop: what every engine's scheduling loop shares, and ``scheduler_for``.

A loop holds the requests, the WAITING and RUNNING queues, the KV pool and the step
ledger (``StepPass``). One ``schedule()`` runs the running pass, then (unless it
preempted) the waiting pass, and returns a StepRecord; ``update_from_output`` applies
sampled and accepted tokens, finishes requests and proposes drafts for the next step.

An engine family subclasses it (``vllm_loop.VllmLoop``, ``fastdeploy_loop.FastDeployLoop``)
and supplies the control flow: the running pass, the victim of a failed allocation and
whether progress was possible (the waiting pass and its admission gate are shared; a loop
may override them); it states that control flow in class attributes, which the
prover's pass skeleton (``proofs/pass_skeleton.py``) follows. A policy names
its loop (``BudgetPolicy.loop``); the policy parametrizes the budget arithmetic.

A loop variant (a user's change to an engine's loop) subclasses an engine loop and sets a
flag or overrides a hook: the classmethods ``running_grant``, ``admission``, ``victim``
and ``cursor_after_preemption`` are written over IntLike, and the loop calls them on ints
as the pass skeleton calls them on z3 terms, so ``check``, ``prove`` and ``fuzz`` judge the
variant as they judge a policy.
"""
from __future__ import annotations

import bisect
from typing import ClassVar, Hashable, Optional, Sequence

from ..spec import grant_rules
from ..spec.intlike import BoolLike, IntLike, ite
from ..spec.queue_ids import QueueIds
from ..spec.records import RequestState, StepLimits, StepOutcome, StepRecord
from . import decisions, methods
from .config import BudgetConfig
from .kv_pool import KVBlockPool
from .physical_need import physical_need
from .policy import BudgetParams, BudgetPolicy, Budgets
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


HOOKS = ("running_grant", "admission", "victim", "cursor_after_preemption")  # a loop variant's classmethods
VARIANT_FLAGS = ("running_checks_exit_rule", "waiting_checks_exit_rule", "unschedules_refunded")  # and its flags


def _priority_order(req: Request) -> tuple[int, int]:
    return req.priority, req.arrival


def scheduler_for(cfg: BudgetConfig, policy: BudgetPolicy, validate: bool = True) -> "SchedulerLoop":
    """The reference scheduler of cfg under policy: its loop (``policy.loop``).
    Raises ConfigError when ``validate`` and the policy refuses cfg."""
    loop: type[SchedulerLoop] = policy.loop
    return loop(cfg, policy, validate)


class SchedulerLoop:
    """The shared state, bookkeeping and waiting pass of a scheduling loop; subclasses
    supply the running pass and ``_progress_possible``."""

    # The loop's control flow, as the prover's pass skeleton follows it; each loop sets all three.
    drafts_in_grant: ClassVar[bool]  # a decode's grant counts its scheduled drafts
    pads_short_admissions: ClassVar[bool]  # a 1-token admission is padded to 1 + k
    decodes_bypass_budget: ClassVar[bool]  # an unvisited decode still runs, on the KV blocks it holds
    applies_long_prefill_threshold: ClassVar[bool] = True  # the engine reads long_prefill_token_threshold
    running_checks_exit_rule: ClassVar[bool] = True  # the running pass stops when the policy's exit rule says so
    waiting_checks_exit_rule: ClassVar[bool] = True  # the waiting pass admits only while the exit rule lets it
    unschedules_refunded: ClassVar[bool] = True  # a same-step preemption takes the victim's grant off the step too
    one_pass_skeleton: ClassVar[bool] = True  # the prover's pass skeleton models this loop's step
    drafts_after_sampling: ClassVar[bool] = True  # a model drafter drafts (and writes KV) in the step that sampled
    # The hooks and variant flags this loop's step calls or reads, declared once per loop
    # (``tests/integration/test_loop_hooks.py`` runs each loop and holds it to this); a variant
    # that changes one outside it is refused when it loads (``ignored_overrides``).
    honours: ClassVar[frozenset[str]] = frozenset(HOOKS + VARIANT_FLAGS)
    # The engine's physical facts (``physical_need``), read from the loop class the model defines:
    decodes_run_decode_rows: ClassVar[bool] = False  # a decode runs its method's decode_rows whatever it was granted

    @classmethod
    def method_table(cls, version: Optional[str]) -> str:
        """The method table the engine runs at ``version`` (a key of ``methods.TABLES``)."""
        return methods.DEFAULT_TABLE

    # -- the hooks of a loop variant (IntLike: the pass skeleton calls them on z3 terms) ---
    @classmethod
    def running_grant(cls, policy: BudgetPolicy, p: BudgetParams, budgets: Budgets, demand: IntLike,
                      computed: IntLike, threshold: IntLike, max_model_len: IntLike, bypass: BoolLike) -> IntLike:
        """Tokens for a running request that wants ``demand`` (<= 0: skip it and go on): the
        threshold, then the policy's grant, then the clip to max_model_len (``decisions.running_grant``)."""
        return decisions.running_grant(policy, p, budgets, demand, computed, threshold, max_model_len, bypass)

    @classmethod
    def admission(cls, policy: BudgetPolicy, p: BudgetParams, budgets: Budgets, demand: IntLike, computed: IntLike,
                  threshold: IntLike, max_model_len: IntLike, k: IntLike, prefill_scheduled: BoolLike,
                  running_scheduled: BoolLike, chunked_prefill: BoolLike) -> decisions.Admission:
        """The decision for the head of the waiting queue: padding (when ``pads_short_admissions``)
        and its max_model_len gate, then the threshold, then the policy (``decisions.admission``)."""
        return decisions.admission(policy, p, budgets, demand, computed, threshold, max_model_len, k,
                                   cls.pads_short_admissions, prefill_scheduled, running_scheduled, chunked_prefill)

    @classmethod
    def victim(cls, priority_scheduling: BoolLike, running: Sequence[BoolLike], priority: Sequence[IntLike],
               arrival: Sequence[IntLike]) -> list[BoolLike]:
        """One-hot over the running queue: the request preempted when an allocation fails
        (``decisions.victim``); all False when none runs."""
        return decisions.victim(priority_scheduling, running, priority, arrival)  # type: ignore[no-any-return]

    @classmethod
    def cursor_after_preemption(cls, index: IntLike, victim_index: IntLike) -> IntLike:
        """The running pass's cursor (``index``, the request being scheduled) after the
        victim at ``victim_index`` left the running queue: one back when it stood before."""
        return ite(victim_index < index, index - 1, index)

    @classmethod
    def structure_changes(cls) -> list[str]:
        """The flags and hooks of the pass's structure this loop changes from the shared
        loop's (the prover's induction assumes none of them changed)."""
        out = [name for name in ("running_checks_exit_rule", "waiting_checks_exit_rule", "unschedules_refunded")
               if not getattr(cls, name)]
        for name in ("victim", "cursor_after_preemption"):
            if getattr(cls, name).__func__ is not getattr(SchedulerLoop, name).__func__:
                out.append(name)
        return out

    @classmethod
    def ignored_overrides(cls) -> list[tuple[str, type["SchedulerLoop"]]]:
        """The hooks this loop overrides and the variant flags it sets, with the loop that
        declares ``honours`` (the nearest in its bases, itself when it restates it), that the
        declaring loop neither calls nor reads: a change the step would silently ignore."""
        declarer = next(c for c in cls.__mro__ if "honours" in vars(c))
        changed = [hook for hook in HOOKS if getattr(cls, hook).__func__ is not getattr(declarer, hook).__func__]
        changed += [flag for flag in VARIANT_FLAGS if getattr(cls, flag) != getattr(declarer, flag)]
        return [(name, declarer) for name in changed if name not in declarer.honours]

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
        """Run one scheduling pass; computed tokens advance by the grants."""
        policy, params = self.policy, self.params
        fingerprint = self.fingerprint()
        self.aborted_in_step = []
        num_decoding = sum(1 for r in self.running if not r.is_prefill_chunk)
        initial = policy.initial_budgets(params, num_decoding)
        step = StepPass(policy, params, initial, self.need)
        progress_possible = self._progress_possible(step)
        num_eligible = len(self.running) + len(self.waiting)
        applies = num_eligible > 1 and self.applies_long_prefill_threshold
        threshold = self.cfg.long_prefill_token_threshold if applies else 0

        self._schedule_running(step, threshold)
        if not step.preempted:
            self._schedule_waiting(step, threshold)

        for rid, grant in step.grants.items():
            req = self.requests[rid]
            req.num_computed_tokens += grant
            req.is_prefill_chunk = req.num_computed_tokens < req.num_tokens
            req.num_draft_tokens = 0
        if step.grants or step.preempted or self.aborted_in_step:
            self.state_changes += 1
        waiting = self.waiting_ids()
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
            paused=frozenset(step.paused),
            running=tuple([r.request_id for r in self.running]),
            waiting=waiting,
            kv_blocks_in_use=self.pool.num_in_use,
            block_tables={r.request_id: r.block_table() for r in self.running},
            block_keys=self._shared_block_keys(),
            unserved_demand=self._unserved_demand(),
            initial_token_budget=initial.token,
            initial_input_budget=initial.input,
            ledger=tuple(step.ledger),
            progress_possible=progress_possible,
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

    def _schedule_running(self, step: StepPass, threshold: int) -> None:
        """The running pass: grant running requests in queue order (``_grant_running``)."""
        raise NotImplementedError

    def _pick_victim(self) -> Request:
        """The running request to preempt when an allocation fails (``victim``)."""
        running = self.running
        onehot = self.victim(self.cfg.scheduling_policy == "priority", [True] * len(running),
                             [r.priority for r in running], [r.arrival for r in running])
        return running[onehot.index(True)]

    def _progress_possible(self, step: StepPass) -> bool:
        """Could some request take a token at the start of the pass?"""
        raise NotImplementedError

    def _grant_running(self, step: StepPass, index: int, grant: int, num_drafts: int, kv_tokens: int) -> Optional[int]:
        """Allocate KV for running request ``index`` to run ``kv_tokens`` more, preempting
        victims (refunding a victim granted earlier in the pass) until it fits, and record
        its grant. Returns the index of the next request to visit, or None when the request
        preempted itself (the running pass ends)."""
        req = self.running[index]
        computed = req.num_computed_tokens
        slots = grant_rules.kv_slots_needed(computed, kv_tokens, self.lookahead, self.cfg.max_model_len)
        while not self.pool.allocate(req, slots, []):
            victim = self._pick_victim()
            victim_index = self.running.index(victim)
            del self.running[victim_index]
            index = int(self.cursor_after_preemption(index, victim_index))
            if victim.request_id in step.grants:
                step.record_refund(victim, unschedule=self.unschedules_refunded)
                if self.unschedules_refunded:
                    step.scheduled_running.remove(victim)
            self._preempt(victim)
            step.preempted.append(victim.request_id)
            if victim is req:
                return None
        self.pool.cache_full_blocks(req, min(computed + grant, req.num_tokens))
        step.record_grant(req, grant, num_drafts, padded=False)
        step.scheduled_running.append(req)
        step.prefill_scheduled |= req.is_prefill_chunk  # vLLM never clears it, even on a refund
        return index + 1

    def _schedule_waiting(self, step: StepPass, threshold: int) -> None:
        """The waiting pass: admit the head of the queue while the exit rule, the sequence
        cap, the admission decision and the KV pool let it; stop at the first that cannot."""
        policy, cfg, k = self.policy, self.cfg, self.k
        while self.waiting and (step.may_schedule() or not self.waiting_checks_exit_rule):
            if len(self.running) >= self._admission_seq_cap():
                break
            req = self.waiting[0]
            hits = self.pool.find_cached_prefix(req) if req.num_computed_tokens == 0 else []
            computed = req.num_computed_tokens + len(hits) * cfg.block_size
            decision = self.admission(
                policy, self.params, step.budgets, req.num_tokens - computed, computed, threshold,
                cfg.max_model_len, k, step.prefill_scheduled, bool(step.scheduled_running),
                self.params.enable_chunked_prefill,
            )
            if decision.stop:
                break
            grant = decision.grant
            assert grant > 0, f"waiting loop granted {grant} with budgets {step.budgets}"
            slots = grant_rules.kv_slots_needed(computed, grant, self.lookahead, cfg.max_model_len)
            if not self._whole_sequence_fits(req, hits) or not self.pool.allocate(req, slots, hits):
                break
            del self.waiting[0]
            self.running.append(req)
            req.status = Status.RUNNING
            req.num_computed_tokens = computed
            self.pool.cache_full_blocks(req, min(computed + grant, req.num_tokens))
            step.record_grant(req, grant, k if decision.padded else 0, decision.padded)

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

    def _admission_seq_cap(self) -> int:
        """The most requests the waiting pass lets run: max_num_seqs, unless the engine caps it."""
        return self.cfg.max_num_seqs

    def _whole_sequence_fits(self, req: Request, hits: list[int]) -> bool:
        """The admission gate, vLLM's ``scheduler_reserve_full_isl`` (on by default, and
        shared by the FastDeploy model: SPEC.md §5): a waiting request is admitted only if
        the free blocks could hold its whole sequence so far (prompt and outputs, at most
        max_model_len), not only its first chunk."""
        whole = min(req.num_tokens, self.cfg.max_model_len)
        return self.pool.blocks_needed(req, whole, hits) <= self.pool.num_free

    def _room_for_a_token(self, admit: bool) -> bool:
        """Could the KV pool give some request one more token: a running one, or (when
        ``admit``, a budget and a sequence slot being left) the head of the waiting queue?"""
        free, cfg = self.pool.num_free, self.cfg
        for req in self.running:
            if req.num_computed_tokens + 1 >= cfg.max_model_len:
                continue
            slots = grant_rules.kv_slots_needed(req.num_computed_tokens, 1, self.lookahead, cfg.max_model_len)
            if self.pool.blocks_needed(req, slots, []) <= free:
                return True
        if self.waiting and len(self.running) < self._admission_seq_cap() and admit:
            req = self.waiting[0]
            hits = self.pool.find_cached_prefix(req)
            slots = grant_rules.kv_slots_needed(len(hits) * cfg.block_size, 1, self.lookahead, cfg.max_model_len)
            return self.pool.blocks_needed(req, slots, hits) <= free and self._whole_sequence_fits(req, hits)
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
