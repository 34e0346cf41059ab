"""AsyncVllmLoop: vLLM's ``AsyncScheduler``, the scheduler vLLM serves with by default.

The engine schedules step N+1 before step N's output comes back (the batch queue of
``EngineCore.step_with_batch_queue``), so a request is scheduled again while its tokens
are in flight. The scheduler counts them as output placeholders and gives every decode
``num_spec_tokens_to_schedule`` placeholder drafts (-1) that the worker fills; no real
draft ever reaches the scheduler. SPEC.md §14 explains each rule once; each is cited
beside its code. ``update_from_output(record)`` applies the output of the step before
``record`` and keeps ``record``'s for the next call: the one-step lag.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Optional

from ...spec.records import StepOutcome, StepRecord
from ..request import Request, Status
from ..step_pass import StepPass
from ...spec import grant_rules
from .. import decisions
from .loop import VllmLoop


SYNC_ONLY_METHODS = ("ngram",)  # the CPU n-gram drafter: async is off by default (config/vllm.py:1597-1610 (vLLM 0.32.0))


def runs_async(method: Optional[str]) -> bool:
    """Whether vLLM serves a deployment drafting with ``method`` (None: no speculation) async."""
    return method not in SYNC_ONLY_METHODS


V1_RUNNER_RELEASES = ("0.32", "0.33")  # 0.34 has Model Runner V2 only (no vllm/v1/worker/gpu_model_runner.py (vLLM 0.34.0))
V1_RUNNER_METHODS = ("suffix", "medusa", "mlp_speculator", "custom_class")  # config/vllm.py:2927-2934 (vLLM 0.32.0)
V2_PARALLEL_METHODS = ("dflash", "dspark")  # config/vllm.py:2939-2943 (vLLM 0.32.0)


def worker_keeps_drafts(version: Optional[str], method: Optional[str], parallel_drafting: bool) -> bool:
    """Whether the model runner keeps each request's last drafts until it runs again (Model
    Runner V2), so a request the pass left out still gets real drafts; the V1 runner fills
    placeholders only for the requests of the batch before (SPEC.md §6 F9)."""
    if version is None or version not in V1_RUNNER_RELEASES:
        return True
    return not (method in V1_RUNNER_METHODS or (parallel_drafting and method not in V2_PARALLEL_METHODS))


@dataclass(frozen=True)
class InFlight:
    """A scheduled step whose output has not come back: its record, the drafts accepted
    per request, and the requests that sample in it (those no longer prefilling)."""

    record: StepRecord
    accepted: dict[str, int]
    samples: frozenset[str]
    made_for: dict[str, int]  # request -> the step its scheduled drafts were made for (-1: none)


class AsyncVllmLoop(VllmLoop):
    sync_loop = VllmLoop  # the loop this one runs asynchronously

    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self.placeholders: dict[str, int] = {}  # num_output_placeholders per request
        self.drafted_for: dict[str, int] = {}  # the step a request's placeholder drafts were made for
        self.in_flight: Optional[InFlight] = None
        self.drafts_made_for: dict[str, int] = {}  # the last pass: request -> step its scheduled drafts were made for

    # -- the pass ---------------------------------------------------------------------
    def _finishes_in_flight(self, req: Request) -> bool:
        """Its in-flight tokens reach ``max_tokens`` even if every draft is rejected
        (vllm/v1/core/sched/scheduler.py:664-678 (vLLM 0.32.0); :800-814 (0.33.0))."""
        p = self.placeholders.get(req.request_id, 0)
        return p > 0 and req.num_computed_tokens + 2 - p >= req.num_prompt_tokens + req.max_tokens

    def _known_tokens(self, req: Request) -> int:
        """With the tokens in flight (scheduler.py:703-706 (vLLM 0.32.0))."""
        return req.num_tokens + self.placeholders.get(req.request_id, 0)

    def _running_drafts(self, req: Request, grant: int, known: int) -> int:
        """Drafts past the known and in-flight tokens (scheduler.py:861-872 (vLLM 0.32.0))."""
        return decisions.scheduled_drafts(True, req.num_draft_tokens, req.num_computed_tokens, grant, known, True)

    def _preempt(self, req: Request, front: bool = True) -> None:
        """Placeholders are zeroed at preemption (scheduler.py:1607 (vLLM 0.32.0))."""
        super()._preempt(req, front)
        self.placeholders.pop(req.request_id, None)
        self.drafted_for.pop(req.request_id, None)

    def schedule(self) -> StepRecord:
        """The pass, then ``AsyncScheduler._update_after_schedule``: a request past its
        prefill holds 1 + its scheduled drafts as placeholders and gets k placeholder drafts
        for the next step (vllm/v1/core/sched/async_scheduler.py:25-50 (vLLM 0.32.0))."""
        drafted_for = dict(self.drafted_for)
        record = super().schedule()
        self.drafts_made_for = {rid: drafted_for.get(rid, -1) for rid, n in record.scheduled_draft_tokens.items() if n}
        # V2's kept drafts are real but the fake runner rejects them, as it may any draft
        keeps = worker_keeps_drafts(self.cfg.engine_version, self.cfg.method, self.cfg.parallel_drafting)
        stale = frozenset() if keeps else frozenset(rid for rid, made_for in self.drafts_made_for.items()
                                                    if made_for != record.step and rid not in record.padded)
        if stale:
            record = replace(record, stale_drafts=stale)
        for rid, grant in record.num_scheduled_tokens.items():
            req = self.requests[rid]
            p = self.placeholders.get(rid, 0)
            req.is_prefill_chunk = req.num_computed_tokens < req.num_tokens + p  # scheduler.py:1633-1636 (0.32.0)
            if req.is_prefill_chunk:
                continue
            self.placeholders[rid] = p + 1 + record.scheduled_draft_tokens.get(rid, 0)
            req.num_draft_tokens = self.k
            self.drafted_for[rid] = record.step + 1
        return record

    def _progress_possible(self, step: StepPass) -> bool:
        """As the sync loop's, leaving out a running request whose in-flight tokens finish
        it (the pass skips it)."""
        free, cfg = self.pool.num_free, self.cfg
        for req in self.running:
            if req.num_computed_tokens + 1 >= cfg.max_model_len or self._finishes_in_flight(req):
                continue
            slots = grant_rules.kv_slots_needed(req.num_computed_tokens, 1, self.lookahead, cfg.max_model_len)
            if self.pool.blocks_needed(req, slots, []) <= free:
                return True
        if not self.waiting or len(self.running) >= self._admission_seq_cap():
            return False
        head = self.waiting[0]
        hits = self.pool.find_cached_prefix(head)
        slots = grant_rules.kv_slots_needed(len(hits) * cfg.block_size, 1, self.lookahead, cfg.max_model_len)
        return self.pool.blocks_needed(head, slots, hits) <= free and self._whole_sequence_fits(head, hits)

    # -- the output, one step late ------------------------------------------------------
    def update_from_output(self, record: StepRecord, accepted: dict[str, int] | None = None) -> StepOutcome:
        """Apply the output of the step scheduled before ``record`` and hold ``record``'s
        until the next call (vllm/v1/engine/core.py:698-810 (vLLM 0.32.0): the batch queue
        of two)."""
        samples = frozenset(rid for rid in record.num_scheduled_tokens
                            if not self.requests[rid].is_prefill_chunk)
        previous, self.in_flight = self.in_flight, InFlight(record, dict(accepted or {}), samples, self.drafts_made_for)
        touched = set(record.num_scheduled_tokens).union(record.preempted, self.aborted_in_step)
        if previous is not None and previous.samples:
            self.state_changes += 1
            touched |= previous.samples
            for rid in previous.record.num_scheduled_tokens:
                if rid in previous.samples:
                    self._apply_one(rid, previous)
        return StepOutcome(step=record.step, requests={rid: self.request_state(rid) for rid in touched},
                           preempted=frozenset(record.preempted))

    def _apply_one(self, rid: str, flight: InFlight) -> None:
        """One request's sampled token and accepted drafts (scheduler.py:2077-2170 (vLLM 0.32.0))."""
        req, record = self.requests[rid], flight.record
        if req.is_finished:
            return  # aborted while in flight (scheduler.py:2088-2097 (vLLM 0.32.0))
        drafts = record.scheduled_draft_tokens.get(rid, 0)
        fresh = flight.made_for.get(rid, -1) == record.step
        taken = min(flight.accepted.get(rid, 0), drafts) if fresh and rid not in record.padded else 0
        running = req.status is Status.RUNNING
        if running:  # a preempted request's output is stale: its counters were reset (scheduler.py:2124-2128)
            rejected = drafts - taken
            req.num_computed_tokens -= rejected
            self._take_placeholders(rid, rejected)
        room = min(req.max_tokens - req.num_output_tokens, self.cfg.max_model_len - req.num_tokens)
        kept = min(1 + taken, room)
        req.num_output_tokens += kept
        if running:
            if self.rules.stop_cuts_computed:  # scheduler.py:2758-2769 (vLLM 0.33.0)
                req.num_computed_tokens -= 1 + taken - kept
                self._take_placeholders(rid, 1 + taken)
            else:  # async_scheduler.py:69-71 (vLLM 0.32.0)
                self._take_placeholders(rid, kept)
        if running:  # before a stop frees them: async_scheduler.py:73-77 (vLLM 0.32.0); scheduler.py:2403-2415 (0.33.0)
            self.pool.cache_full_blocks(req, req.num_computed_tokens - self.placeholders.get(rid, 0))
        if req.num_output_tokens >= req.max_tokens or req.num_tokens >= self.cfg.max_model_len:
            (self.running if running else self.waiting).remove(req)
            self._release_finished(req)
            req.status = Status.FINISHED
            self.placeholders.pop(rid, None)
            self.drafted_for.pop(rid, None)

    def _take_placeholders(self, rid: str, n: int) -> None:
        p = self.placeholders.get(rid, 0)
        if p > 0:
            self.placeholders[rid] = max(0, p - n)

    def abort_request(self, request_id: str) -> None:
        super().abort_request(request_id)
        self.placeholders.pop(request_id, None)
        self.drafted_for.pop(request_id, None)
