"""SglangLoop: SGLang's scheduling step with speculative decoding, a prefill batch OR a decode
batch (python/sglang/srt/managers/scheduler.py at v0.5.23; SPEC.md §10).

``get_next_batch_to_run`` (scheduler.py:3894) first asks for a prefill batch
(``_get_new_batch_prefill_raw``, :4079); only when none forms does the running batch decode
(``update_running_batch``, :4459). Mixed chunking is off under speculation.

Prefill (``PrefillAdder``, schedule_policy.py:607): one pass budget, ``rem_input_tokens`` =
max_prefill_tokens (= ``rem_chunk_tokens`` = chunked_prefill_size here: both are
``max_num_batched_tokens``), charged the page-ceiled extend (:895-938); the KV budget
``rem_total_tokens`` = free KV minus each running request's reserved future
``min(max_new - out, 4096) * new_token_ratio`` (:785-795) and minus what each admission
reserves (``PrefillBudget``: its page-ceiled extend, a page and its whole clipped max_new,
prefill_budget.py:156-169); a request is admitted while ``extend + max_new + page <
rem_total_tokens`` (``add_one_req``, :1404-1414); a seat limit (max_running_requests, the
request-slot pool: ``get_num_allocatable_reqs``, scheduler.py:4027) sets the ``batch_is_full``
latch, which keeps prefill shut until a request leaves the batch (:4226-4234, :4281). An
extend longer than the chunk budget is cut to it, floored to a page, and continues first in
the next prefill, cut there to its budgets without the floor (``add_chunked_req``,
schedule_policy.py:1140-1219); with chunked prefill off a prompt is admitted whole, and after
the first only while its page-ceiled extend is below the budget left (:1626-1632). An
aborted decode clears the latch one decode later (``abort_request``).

Decode (``update_running_batch``): ``check_decode_mem`` (schedule_batch.py:3432) asks the
policy's KV need of the batch; when short, ``retract_decode`` (:3451) retracts requests, the
policy's order, popped from the end, releasing their KV, back of the waiting queue, until
the rest pass the policy's retraction check or one is left (then the policy aborts it or
lets the allocation fail); the batch left keeps the retraction order (``filter_batch``, :3532),
which breaks the next retraction's ties. ``new_token_ratio`` decays each decode step without a retraction
and is re-estimated after one (new_token_ratio_tracker.py:34-49). Each decode then runs
``num_draft_tokens = 1 + k`` verify rows (topk 1): its grant counts its drafts, and its KV is
reserved up to the policy's target; a reservation the pool cannot give is taken as far as it
goes, so ``kv-capacity`` sees the request hold less than its verify writes.
"""
from __future__ import annotations

from dataclasses import replace
from typing import Optional

from ..spec.intlike import cdiv
from ..spec.records import StepOutcome, StepRecord
from .config import BudgetConfig
from .kv_pool import KVBlockPool
from .loop import SchedulerLoop
from .request import Request, Status
from .step_pass import StepPass

CLIP_MAX_NEW_TOKENS = 4096  # schedule_policy.py:89
INIT_NEW_TOKEN_RATIO = 0.7  # environ SGLANG_INIT_NEW_TOKEN_RATIO
MIN_NEW_TOKEN_RATIO = INIT_NEW_TOKEN_RATIO * 0.14  # SGLANG_MIN_NEW_TOKEN_RATIO_FACTOR
NEW_TOKEN_RATIO_DECAY = (INIT_NEW_TOKEN_RATIO - MIN_NEW_TOKEN_RATIO) / 600  # SGLANG_NEW_TOKEN_RATIO_DECAY_STEPS
RETRACT_DECODE_STEPS = 20  # SGLANG_RETRACT_DECODE_STEPS


def context_headroom(cfg: BudgetConfig) -> int:
    """The positions past the context length a request's req_to_token row holds
    (``get_req_to_token_extra_context_len``, mem_cache/allocation_sizing.py:96-116 at v0.5.23):
    4 + num_draft_tokens (1 + k), with pages at least the decode reservation 2A + page - 1. A
    verify runs its 1 + k rows there however near the context length the request is."""
    k = cfg.num_speculative_tokens
    if not k:
        return 4
    extra = 4 + 1 + k
    return max(extra, 2 * (1 + k) + cfg.block_size - 1) if cfg.block_size > 1 else extra


class PrefillBudget:
    """``PrefillBudget`` of one prefill pass (mem_cache/prefill_budget.py:62-169 at v0.5.23): the
    free KV less the running requests' reserved future (``total_offset``, schedule_policy.py:673-680)
    and less what each admission reserves."""

    def __init__(self, free: int, future: float) -> None:
        self.free = free
        self.total_offset = future
        self.current_offset = 0.0

    @property
    def remaining_total(self) -> float:
        return self.free - self.total_offset

    def has_capacity(self) -> bool:
        return self.remaining_total > 0 and self.free - self.current_offset > 0

    def reserve(self, ceiled_extend: int, page: int, max_new: int) -> None:
        self.total_offset += ceiled_extend + page + max_new
        self.current_offset += ceiled_extend + page


class SglangLoop(SchedulerLoop):
    drafts_in_grant = True
    pads_short_admissions = False
    decodes_bypass_budget = False
    applies_long_prefill_threshold = False
    one_pass_skeleton = False  # a step prefills or decodes, never both
    drafts_after_sampling = False  # EAGLE drafts at the start of the next decode, in its KV reservation
    honours = frozenset()  # a prefill or a decode batch of its own: no shared hook or variant flag is read

    @classmethod
    def method_table(cls, version: Optional[str]) -> str:
        return "sglang"

    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self.limits = replace(self.limits, context_headroom=context_headroom(self.cfg))
        self.pool = KVBlockPool(self.cfg.num_kv_blocks, self.cfg.block_size, False)  # no radix cache: nothing shared
        self.new_token_ratio = INIT_NEW_TOKEN_RATIO
        self.batch_is_full = False
        self.abort_pending = False  # an aborted decode SGLang still runs once (``abort_request``)
        self.chunked: Optional[Request] = None  # the request whose prefill continues first

    # -- sizes -------------------------------------------------------------------------
    @property
    def page(self) -> int:
        return self.cfg.block_size

    @property
    def alloc_per_decode(self) -> int:
        """A = max(steps * topk, num_draft_tokens) = 1 + k with topk 1
        (mem_cache/allocation_sizing.py:28-61)."""
        return 1 + self.k

    def allocated(self, req: Request) -> int:
        """kv_allocated_len: whole pages (allocation_sizing.py:73-100)."""
        return len(req.block_ids) * self.page

    def available(self) -> int:
        return self.pool.num_free * self.page

    def max_new_tokens(self, req: Request) -> int:
        """``min(sampling_params.max_new_tokens, 4096)``, what an admission reserves whatever the
        request wrote before a retraction (schedule_policy.py:1636, :1209); max_new_tokens is
        max_tokens clipped to the context (the tokenizer's rule)."""
        return min(req.max_tokens, self.cfg.max_model_len - req.num_prompt_tokens, CLIP_MAX_NEW_TOKENS)

    def max_new_estimate(self, req: Request) -> int:
        """``min(max_new - out, 4096)``, the max_new left also clipped to max_model_len
        (the tokenizer refuses a request past the context length)."""
        left = min(req.max_tokens - req.num_output_tokens, self.cfg.max_model_len - req.num_tokens)
        return max(0, min(left, CLIP_MAX_NEW_TOKENS))

    # -- the step ------------------------------------------------------------------------
    def _schedule_running(self, step: StepPass, threshold: int) -> None:
        """The whole SGLang step: a prefill batch if one forms, else a decode batch."""
        if all(r is self.chunked for r in self.running):  # the running batch is empty (scheduler.py:4093-4096)
            self.batch_is_full = self.abort_pending = False
        if self._prefill(step):
            return
        self._decode(step)

    def _schedule_waiting(self, step: StepPass, threshold: int) -> None:
        """Admission happens in the prefill half of ``_schedule_running``."""

    def _seats(self) -> int:
        """``get_num_allocatable_reqs`` (scheduler.py:4027): the request slots (max_running_requests)
        the running batch leaves; the chunked request is not in it."""
        return self.cfg.max_num_seqs - sum(1 for r in self.running if r is not self.chunked)

    def _budget_state(self, step: StepPass, kv: "PrefillBudget") -> str:
        """``budget_state`` (schedule_policy.py:874-893): "no-token" when the KV budget is spent,
        "other" when the pass budget (``rem_input_tokens`` = ``rem_chunk_tokens`` = B) is."""
        if not kv.has_capacity():
            return "no-token"
        return "continue" if step.may_schedule() else "other"

    def _continue_chunk(self, step: StepPass, kv: "PrefillBudget", batch: list[Request]) -> None:
        """``add_chunked_req`` (schedule_policy.py:1140-1219): the chunked request's next chunk is
        ``min(extend, rem_chunk_tokens, int(rem_total_tokens))``, or the chunk budget when no KV
        budget is left (``available_chunk_tokens``, prefill_budget.py:140-143), not floored to a
        page; it reserves its page-ceiled chunk and a page, and its max_new when it finishes the prompt."""
        req = self.chunked
        assert req is not None
        rem_chunk = int(step.budgets.token)
        available = min(rem_chunk, int(kv.remaining_total))
        limit = available if available > 0 else rem_chunk
        extend = req.num_tokens - req.num_computed_tokens
        grant = min(extend, limit)
        if grant <= 0 or not self._allocate(req, req.num_computed_tokens + grant):
            return
        finishes = grant == extend
        kv.reserve(cdiv(grant, self.page) * self.page, self.page, self.max_new_tokens(req) if finishes else 0)
        step.record_grant(req, grant, 0, padded=False)
        step.scheduled_running.append(req)
        batch.append(req)
        self.chunked = None if finishes else req

    def _add_one(self, step: StepPass, kv: "PrefillBudget", batch: list[Request], req: Request) -> str:
        """``add_one_req`` (schedule_policy.py:1395-1591) and ``_select_prefill_admission``
        (:1592-1690): the request is admitted while ``extend + max_new + page < rem_total_tokens``
        (``per_req_token_overhead`` = page, :732-737; ``check_prefill``, prefill_budget.py:114-130),
        max_new being what it may still write; an extend whose page-ceiled length passes the
        chunk budget is cut to it floored to a page (:1646-1670); without chunked prefill, after
        the first, a page-ceiled extend of at least the input budget left stops the walk
        (:1626-1632). The admission reserves its page-ceiled extend, a page and (unless cut)
        its whole clipped max_new_tokens (``PrefillBudget.reserve``, prefill_budget.py:156-169);
        the result is the budget state after it."""
        extend, page = req.num_tokens, self.page
        ceiled, token = cdiv(extend, page) * page, int(step.budgets.token)
        if not extend + self.max_new_estimate(req) + page < kv.remaining_total:
            return "no-token"
        if not self.cfg.enable_chunked_prefill and batch and ceiled >= token:
            return "other"
        grant = extend
        if self.cfg.enable_chunked_prefill and ceiled > token:
            grant = token // page * page
            if grant <= 0:
                return "other"
        if not self._allocate(req, grant):
            return "no-token"  # the pool itself is short (SGLang's allocator would fail the step)
        del self.waiting[0]
        self.running.append(req)
        req.status = Status.RUNNING
        req.num_computed_tokens = 0
        kv.reserve(cdiv(grant, page) * page, page, self.max_new_tokens(req) if grant == extend else 0)
        step.record_grant(req, grant, 0, padded=False)
        batch.append(req)
        if grant < extend:
            self.chunked = req
        return self._budget_state(step, kv)

    def _prefill(self, step: StepPass) -> bool:
        """Form a prefill batch (``_get_new_batch_prefill_raw``, scheduler.py:4079-4310); True
        when it scheduled something."""
        if (self.batch_is_full or not self.waiting) and self.chunked is None:  # :4098-4101
            return False
        if self._seats() <= 0 and self.chunked is None:  # :4117-4125
            self.batch_is_full = True
            return False
        decoding = [r for r in self.running if r.is_decoding]
        kv = PrefillBudget(self.available(), sum(self.max_new_estimate(r) * self.new_token_ratio for r in decoding))
        batch: list[Request] = []
        seats = self._seats()
        if self.chunked is not None:  # :4185-4193
            self._continue_chunk(step, kv, batch)
        while self.waiting:  # :4211-4300
            if self._budget_state(step, kv) == "other":
                break
            if len(batch) >= seats:  # the chunk counts in the batch, not in the running batch (:4225-4234)
                self.batch_is_full = True
            if self.batch_is_full:
                break
            result = self._add_one(step, kv, batch, self.waiting[0])
            if result != "continue":
                if result == "no-token":  # :4281-4286
                    self.batch_is_full = bool(batch) or bool(decoding)
                break
        if any(r is self.chunked for r in batch):
            self.batch_is_full = False  # the chunk leaves the filtered prefill batch (scheduler.py:3934-3951)
        return bool(batch)

    def abort_request(self, request_id: str) -> None:
        """As the shared loop: the request leaves at once, its KV released. An aborted chunked
        request leaves the chunk slot too (``process_pending_chunked_abort``, scheduler.py:3778-3810).
        A decoding one SGLang marks ``to_finish`` (``abort_request``, scheduler.py:5797-5812):
        it runs one more decode, finishes there (``update_finish_state``, schedule_batch.py:2011-2013)
        and leaves the running batch at the next step's ``filter_batch``, which clears
        ``batch_is_full`` (scheduler.py:3964-3968); so the latch is cleared after the next decode
        (``abort_pending``)."""
        req = self.requests[request_id]
        decoding = req.status is Status.RUNNING and req.is_decoding and req is not self.chunked
        super().abort_request(request_id)
        if self.chunked is not None and self.chunked.request_id == request_id:
            self.chunked = None
        if decoding:
            self.abort_pending = True

    def _allocate(self, req: Request, tokens: int) -> bool:
        return self.pool.allocate(req, tokens, [])

    def _decode(self, step: StepPass) -> None:
        """``update_running_batch``: check, retract, reserve, then grant every decode 1 + k."""
        batch = [r for r in self.running if r.is_decoding]
        if not batch:
            return
        policy = self.policy
        if not policy.decode_fits(self, batch, retracting=False):
            order = policy.retraction_order(batch)
            retracted = 0
            first = True
            while first or not policy.decode_fits(self, order, retracting=True):
                if len(order) == 1:
                    break
                first = False
                victim = order.pop()
                self.running.remove(victim)
                self._preempt(victim, front=False)  # release_req, reset_for_retract, to the back
                step.preempted.append(victim.request_id)
                retracted += 1
            if len(order) == 1 and policy.aborts_last and not policy.decode_fits(self, order, retracting=True):
                last = order.pop()
                self.running.remove(last)
                self.pool.free(last)
                last.status = Status.ABORTED
                self.aborted_in_step.append(last.request_id)
            self.new_token_ratio = min(1.0, (sum(r.num_output_tokens for r in order) + RETRACT_DECODE_STEPS * len(order))
                                       / (sum(r.max_tokens for r in order) + 1))
            self.batch_is_full = False
            batch = order
            kept = set(map(id, order))  # filter_batch(keep_indices=sorted_indices): the batch takes the retraction
            self.running = order + [r for r in self.running if id(r) not in kept]  # order (schedule_batch.py:3532)
        else:
            self.new_token_ratio = max(self.new_token_ratio - NEW_TOKEN_RATIO_DECAY, MIN_NEW_TOKEN_RATIO)
        grant = self.alloc_per_decode  # num_draft_tokens verify rows, near max_model_len too (context_headroom)
        for req in batch:
            target = policy.decode_target(self, req)
            if not self._allocate(req, target):
                self._allocate(req, self.allocated(req) + self.available())  # the pool runs out mid-reservation
            step.record_grant(req, grant, grant - 1, padded=False)
            step.scheduled_running.append(req)
        if self.abort_pending:  # the aborted request decoded with this batch and leaves it
            self.batch_is_full = self.abort_pending = False

    def _progress_possible(self, step: StepPass) -> bool:
        """Some decode fits its own need in the free KV, or nothing runs and a request waits."""
        free = self.available()
        decoding = [r for r in self.running if r.is_decoding]
        if any(self.policy.decode_target(self, r) - self.allocated(r) <= free for r in decoding):
            return True
        if self.chunked is not None:
            return True
        return not self.running and bool(self.waiting)

    # -- output --------------------------------------------------------------------------
    def update_from_output(self, record: StepRecord, accepted: dict[str, int] | None = None) -> StepOutcome:
        was_running = len(self.running)
        outcome = super().update_from_output(record, accepted)
        if self.policy.trims_rejected:
            for req in self.running:
                if req.is_decoding and req.request_id in record.num_scheduled_tokens:
                    self.pool.free_tail(req, cdiv(req.num_computed_tokens, self.page))  # the rejected drafts' pages
        if len(self.running) < was_running:
            self.batch_is_full = False
        return outcome

    def _loop_state(self) -> tuple[object, ...]:
        """The admission latch, a pending abort, the chunked request and ``new_token_ratio`` (which decays
        at every decode step, so a decoding SGLang step is never a fixpoint until it bottoms out)."""
        return (self.batch_is_full, self.abort_pending, None if self.chunked is None else self.chunked.request_id,
                self.new_token_ratio)
