"""SglangLoop: SGLang's scheduling step with speculative decoding, a prefill batch OR a decode
batch (python/sglang/srt/managers/scheduler.py at v0.5.23; SPEC.md §10).

``get_next_batch_to_run`` (scheduler.py:3894) first asks for a prefill batch
(``_get_new_batch_prefill_raw``, :4079); only when none forms does the running batch decode
(``update_running_batch``, :4459). Mixed chunking is off under speculation.

Prefill (``PrefillAdder``, schedule_policy.py:607): one pass budget, ``rem_input_tokens`` =
max_prefill_tokens (= ``rem_chunk_tokens`` = chunked_prefill_size here: both are
``max_num_batched_tokens``), charged the page-ceiled extend (:895-938); the KV budget
``rem_total_tokens`` = free KV minus each running request's reserved future
``min(max_new - out, 4096) * new_token_ratio`` (:785-795) and minus every admitted
request's page-ceiled extend plus its clipped max_new (prefill_budget.py:156); a request is
admitted while ``extend + max_new < rem_total_tokens`` (prefill_budget.py:114); a seat limit
(max_running_requests, the request-slot pool: ``get_num_allocatable_reqs``, scheduler.py:4027)
sets the ``batch_is_full`` latch, which keeps prefill shut until a request leaves the batch
(:4226-4234, :4281). An extend longer than the chunk budget is cut to it, floored to a page,
and continues first in the next prefill (``add_chunked_req``, schedule_policy.py:1140);
with chunked prefill off a prompt is admitted whole, and after the first only while its
page-ceiled extend is below the budget left (schedule_policy.py:1626-1632).

Decode (``update_running_batch``): ``check_decode_mem`` (schedule_batch.py:3432) asks the
policy's KV need of the batch; when short, ``retract_decode`` (:3451) retracts requests, the
policy's order, popped from the end, releasing their KV, back of the waiting queue, until
the rest pass the policy's retraction check or one is left (then the policy aborts it or
lets the allocation fail). ``new_token_ratio`` decays each decode step without a retraction
and is re-estimated after one (new_token_ratio_tracker.py:34-49). Each decode then runs
``num_draft_tokens = 1 + k`` verify rows (topk 1): its grant counts its drafts, and its KV is
reserved up to the policy's target; a reservation the pool cannot give is taken as far as it
goes, so ``kv-capacity`` sees the request hold less than its verify writes.
"""
from __future__ import annotations

from typing import Optional

from ..spec.intlike import cdiv
from ..spec.records import StepOutcome, StepRecord
from .kv_pool import KVBlockPool
from .loop import SchedulerLoop
from .request import Request, Status
from .step_pass import StepPass

CLIP_MAX_NEW_TOKENS = 4096  # schedule_policy.py:89
INIT_NEW_TOKEN_RATIO = 0.7  # environ SGLANG_INIT_NEW_TOKEN_RATIO
MIN_NEW_TOKEN_RATIO = INIT_NEW_TOKEN_RATIO * 0.14  # SGLANG_MIN_NEW_TOKEN_RATIO_FACTOR
NEW_TOKEN_RATIO_DECAY = (INIT_NEW_TOKEN_RATIO - MIN_NEW_TOKEN_RATIO) / 600  # SGLANG_NEW_TOKEN_RATIO_DECAY_STEPS
RETRACT_DECODE_STEPS = 20  # SGLANG_RETRACT_DECODE_STEPS


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
        self.pool = KVBlockPool(self.cfg.num_kv_blocks, self.cfg.block_size, False)  # no radix cache: nothing shared
        self.new_token_ratio = INIT_NEW_TOKEN_RATIO
        self.batch_is_full = False
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

    def max_new_estimate(self, req: Request) -> int:
        """``min(max_new - out, 4096)``, the max_new left also clipped to max_model_len
        (the tokenizer refuses a request past the context length)."""
        left = min(req.max_tokens - req.num_output_tokens, self.cfg.max_model_len - req.num_tokens)
        return max(0, min(left, CLIP_MAX_NEW_TOKENS))

    # -- the step ------------------------------------------------------------------------
    def _schedule_running(self, step: StepPass, threshold: int) -> None:
        """The whole SGLang step: a prefill batch if one forms, else a decode batch."""
        if not self.running:
            self.batch_is_full = False
        if self._prefill(step):
            return
        self._decode(step)

    def _schedule_waiting(self, step: StepPass, threshold: int) -> None:
        """Admission happens in the prefill half of ``_schedule_running``."""

    def _seats(self) -> int:
        """``get_num_allocatable_reqs``: free request slots (max_running_requests)."""
        return self.cfg.max_num_seqs - len(self.running)

    def _prefill(self, step: StepPass) -> bool:
        """Form a prefill batch; True when it scheduled something."""
        if (self.batch_is_full or not self.waiting) and self.chunked is None:
            return False
        if self._seats() <= 0 and self.chunked is None:
            self.batch_is_full = True
            return False
        decoding = [r for r in self.running if r.is_decoding]
        rem_total = self.available() - sum(self.max_new_estimate(r) * self.new_token_ratio for r in decoding)
        scheduled = False
        if self.chunked is not None:
            req = self.chunked
            chunk = int(min(step.budgets.token, rem_total)) if rem_total > 0 else int(step.budgets.token)
            extend = req.num_tokens - req.num_computed_tokens
            grant = extend if cdiv(extend, self.page) * self.page <= chunk else chunk // self.page * self.page
            if grant > 0 and self._allocate(req, req.num_computed_tokens + grant):
                rem_total -= cdiv(grant, self.page) * self.page
                step.record_grant(req, grant, 0, padded=False)
                step.scheduled_running.append(req)
                scheduled = True
                self.chunked = req if grant < extend else None
        admitted, seats = 0, self._seats()
        while self.waiting and not self.batch_is_full and self.chunked is None:  # one chunked request at a time
            if not step.may_schedule():
                break  # budget_state: OTHER
            if rem_total <= 0:  # budget_state: NO_TOKEN
                self.batch_is_full = admitted > 0 or bool(self.running)
                break
            if admitted >= seats:
                self.batch_is_full = True
                break
            req = self.waiting[0]
            extend = req.num_tokens
            max_new = self.max_new_estimate(req)
            if not extend + max_new < rem_total:
                self.batch_is_full = admitted > 0 or bool(self.running)
                break
            grant, ceiled = extend, cdiv(extend, self.page) * self.page
            if not self.cfg.enable_chunked_prefill:
                if admitted and ceiled >= step.budgets.token:
                    break  # whole or not at all; only the first may pass the cap (schedule_policy.py:1626-1632)
            elif ceiled > step.budgets.token:
                grant = int(step.budgets.token) // self.page * self.page
                if grant <= 0:
                    break
            if not self._allocate(req, grant):
                self.batch_is_full = admitted > 0 or bool(self.running)
                break
            del self.waiting[0]
            self.running.append(req)
            req.status = Status.RUNNING
            req.num_computed_tokens = 0
            rem_total -= cdiv(grant, self.page) * self.page + max_new
            step.record_grant(req, grant, 0, padded=False)
            admitted += 1
            scheduled = True
            if grant < extend:
                self.chunked = req
                break
        return scheduled

    def abort_request(self, request_id: str) -> None:
        """As the shared loop; an aborted chunked request leaves the chunk slot too
        (``process_pending_chunked_abort``, scheduler.py:3897)."""
        super().abort_request(request_id)
        if self.chunked is not None and self.chunked.request_id == request_id:
            self.chunked = None

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
        else:
            self.new_token_ratio = max(self.new_token_ratio - NEW_TOKEN_RATIO_DECAY, MIN_NEW_TOKEN_RATIO)
        for req in batch:
            computed = req.num_computed_tokens
            grant = min(self.alloc_per_decode, self.cfg.max_model_len - computed - 1)
            if grant <= 0:
                continue
            target = policy.decode_target(self, req)
            if not self._allocate(req, target):
                self._allocate(req, self.allocated(req) + self.available())  # the pool runs out mid-reservation
            step.record_grant(req, grant, grant - 1, padded=False)
            step.scheduled_running.append(req)

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
        """The admission latch, the chunked request and ``new_token_ratio`` (which decays
        at every decode step, so a decoding SGLang step is never a fixpoint until it bottoms out)."""
        return (self.batch_is_full, None if self.chunked is None else self.chunked.request_id, self.new_token_ratio)
