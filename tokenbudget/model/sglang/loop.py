"""SglangLoop: SGLang's scheduling step with speculative decoding, a prefill batch OR a decode
batch (python/sglang/srt/managers/scheduler.py at v0.5.23; SPEC.md §10)."""
from __future__ import annotations

from dataclasses import replace
from typing import Optional

from ...spec.intlike import cdiv
from ...spec.records import StepOutcome, StepRecord
from ..config import BudgetConfig
from ..kv_pool import KVBlockPool
from ..loop import SchedulerLoop
from ..request import Request, Status
from .radix import RadixCache
from ..step_pass import StepPass

CLIP_MAX_NEW_TOKENS = 4096  # schedule_policy.py:89
INIT_NEW_TOKEN_RATIO = 0.7  # environ SGLANG_INIT_NEW_TOKEN_RATIO
MIN_NEW_TOKEN_RATIO = INIT_NEW_TOKEN_RATIO * 0.14  # SGLANG_MIN_NEW_TOKEN_RATIO_FACTOR
NEW_TOKEN_RATIO_DECAY = (INIT_NEW_TOKEN_RATIO - MIN_NEW_TOKEN_RATIO) / 600  # SGLANG_NEW_TOKEN_RATIO_DECAY_STEPS
RETRACT_DECODE_STEPS = 20  # SGLANG_RETRACT_DECODE_STEPS
WAITING_PREFIX_REFRESH_INTERVAL = 32  # schedule_policy.py:139
WAITING_QUEUE_PREFIX_MATCH_MAX = 128  # schedule_policy.py:137


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
    free KV and the radix cache's evictable KV (``_available_and_evictable``, :91-97; nothing is
    allocated during the walk, but each lock taken makes less of the cache evictable) less the
    running requests' reserved future (``total_offset``, schedule_policy.py:673-680) and less
    what each admission reserves."""

    def __init__(self, free: int, future: float, tree: Optional[RadixCache] = None) -> None:
        self.free = free
        self.tree = tree
        self.total_offset = future
        self.current_offset = 0.0

    @property
    def capacity(self) -> int:
        return self.free + (self.tree.evictable_tokens if self.tree is not None else 0)

    @property
    def remaining_total(self) -> float:
        return self.capacity - self.total_offset

    def has_capacity(self) -> bool:
        return self.remaining_total > 0 and self.capacity - self.current_offset > 0

    def reserve(self, ceiled_extend: int, page: int, max_new: int) -> None:
        self.total_offset += ceiled_extend + page + max_new
        self.current_offset += ceiled_extend + page


class SglangLoop(SchedulerLoop):
    """A step that prefills or decodes, never both (``_schedule_step``): no one-pass skeleton,
    hook or variant flag applies to it."""

    drafts_in_grant = True  # a decode's grant is its 1 + k verify rows
    drafts_after_sampling = False  # EAGLE drafts at the start of the next decode, in its KV reservation

    @classmethod
    def method_table(cls, version: Optional[str]) -> str:
        return "sglang"

    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self.limits = replace(self.limits, context_headroom=context_headroom(self.cfg))
        self.pool = KVBlockPool(self.cfg.num_kv_blocks, self.cfg.block_size, False)  # the tree does the sharing
        # the radix cache: on with enable_prefix_caching (SGLang's disable_radix_cache = not enable_prefix_caching);
        # EAGLE keys the tree by bigrams (kv_cache_builder.py:401: is_eagle)
        self.tree = RadixCache(self.pool, 1 if self.k else 0) if self.cfg.enable_prefix_caching else None
        self.keeps_output = self.tree is not None
        self.new_token_ratio = INIT_NEW_TOKEN_RATIO
        self.batch_is_full = False
        self.abort_pending = False  # an aborted decode SGLang still runs once (``abort_request``)
        self.chunked: Optional[Request] = None  # the request whose prefill continues first
        self.stash: Optional[Request] = None  # a chunk granted last step, checkpointed at this step's start
        self.refreshes = 0  # calc_priority's waiting-prefix refreshes asked (radix cache on)
        self.alloc_len: dict[str, int] = {}  # kv_allocated_len: tokens, not pages (the decode's eviction target)
        self.prefilled: set[str] = set()  # the last prefill batch

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
        """Free KV and what the radix cache could evict for it (``check_decode_capacity`` evicts
        before it compares, allocator/base.py:171-185)."""
        free = self.pool.num_free * self.page
        return free + self.tree.evictable_tokens if self.tree is not None else free

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
    def _schedule_step(self, step: StepPass) -> None:
        """The whole SGLang step: a prefill batch if one forms, else a decode batch."""
        self.prefilled = set()
        if self.stash is not None:  # stash_chunked_request (scheduler.py:3911-3919, :3772-3776)
            if self.stash is self.chunked:
                assert self.tree is not None
                self.tree.checkpoint(self.stash, self.stash.num_computed_tokens)
            self.stash = None
        if all(r is self.chunked for r in self.running):  # the running batch is empty (scheduler.py:4093-4096)
            self.batch_is_full = self.abort_pending = False
        if self._prefill(step):
            return
        self._decode(step)

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

    def _fits_pool(self, req: Request, end: int, promised: int) -> bool:
        """Whether the pages req needs to hold ``end`` tokens are there, with the evictable
        cache and less the pages this walk already promised (the allocation runs after it)."""
        pages = cdiv(end, self.page) - len(req.block_ids)
        evictable = self.tree.evictable_pages if self.tree is not None else 0
        return pages + promised <= self.pool.num_free + evictable

    def _continue_chunk(self, step: StepPass, kv: "PrefillBudget", batch: list[tuple[Request, int]]) -> None:
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
        if grant <= 0 or not self._fits_pool(req, req.num_computed_tokens + grant, 0):
            return
        finishes = grant == extend
        kv.reserve(cdiv(grant, self.page) * self.page, self.page, self.max_new_tokens(req) if finishes else 0)
        step.record_grant(req, grant, 0, padded=False)
        step.scheduled_running.append(req)
        batch.append((req, req.num_computed_tokens + grant))
        self.chunked = None if finishes else req

    def _match(self, req: Request) -> tuple[object, list[int]]:
        """``init_next_round_input`` (schedule_batch.py:1692-1743): the tree's longest cached
        prefix of the request's tokens less the last (``_compute_max_prefix_len``, :1766-1785)."""
        assert self.tree is not None
        return self.tree.match(self.tree.keys(req, self.tree.pages_keyed(req.num_tokens - 1)))

    def _add_one(self, step: StepPass, kv: "PrefillBudget", batch: list[tuple[Request, int]], req: Request) -> str:
        """``add_one_req`` (schedule_policy.py:1395-1591) and ``_select_prefill_admission``
        (:1592-1690): the request's cached prefix is matched and pinned while it is judged
        (``_lock_node``, :1429-1431); it is admitted while ``extend + max_new + page <
        rem_total_tokens`` (``per_req_token_overhead`` = page, :732-737; ``check_prefill``,
        prefill_budget.py:114-130), extend being what the prefix leaves and max_new what it may
        still write; an extend whose page-ceiled length passes the chunk budget is cut to it
        floored to a page (:1646-1670); without chunked prefill, after the first, a page-ceiled
        extend of at least the input budget left stops the walk (:1626-1632). The admission locks
        its prefix, reserves its page-ceiled extend, a page and (unless cut) its whole clipped
        max_new_tokens (``PrefillBudget.reserve``, prefill_budget.py:156-169); the result is the
        budget state after it."""
        tree = self.tree
        node, hit = self._match(req) if tree is not None else (None, [])
        if tree is not None:
            tree.lock(node)  # type: ignore[arg-type]
        try:
            return self._judge(step, kv, batch, req, node, hit)
        finally:
            if tree is not None:
                tree.unlock(node)  # type: ignore[arg-type]

    def _judge(self, step: StepPass, kv: "PrefillBudget", batch: list[tuple[Request, int]], req: Request,
               node: object, hit: list[int]) -> str:
        page, prefix = self.page, len(hit) * self.page
        extend = req.num_tokens - prefix
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
        promised = sum(cdiv(end, page) - len(r.block_ids) for r, end in batch)
        if not self._fits_pool(req, prefix + grant, promised - len(hit)):  # the hit is held already
            return "no-token"  # the pool itself is short (SGLang's allocator would fail the step)
        del self.waiting[0]
        self.running.append(req)
        req.status = Status.RUNNING
        if self.tree is not None:
            self.tree.adopt(req, node, hit)  # type: ignore[arg-type]
        req.num_computed_tokens = prefix
        kv.reserve(cdiv(grant, page) * page, page, self.max_new_tokens(req) if grant == extend else 0)
        step.record_grant(req, grant, 0, padded=False)
        batch.append((req, prefix + grant))
        if grant < extend:
            self.chunked = req
        return self._budget_state(step, kv)

    def _refresh_waiting_prefixes(self) -> None:
        """``_touch_waiting_prefixes`` (schedule_policy.py:282-302): FCFS matches nothing, but one
        ``calc_priority`` in 32 touches the cached path of the first 128 waiting requests, the head
        last (``touch_waiting_prefix``, common.py:215-218: all of their tokens)."""
        tree = self.tree
        if tree is None or not self.waiting:
            return
        self.refreshes += 1
        if (self.refreshes - 1) % WAITING_PREFIX_REFRESH_INTERVAL:
            return
        for req in reversed(self.waiting[:WAITING_QUEUE_PREFIX_MATCH_MAX]):
            tree.match(tree.keys(req, tree.pages_keyed(req.num_tokens)))

    def _prefill(self, step: StepPass) -> bool:
        """Form a prefill batch (``_get_new_batch_prefill_raw``, scheduler.py:4079-4310) and give
        it its KV (``alloc_for_extend``, mem_cache/allocation.py:374-488); True when it
        scheduled something."""
        if (self.batch_is_full or not self.waiting) and self.chunked is None:  # :4098-4101
            return False
        if self._seats() <= 0 and self.chunked is None:  # :4117-4125
            self.batch_is_full = True
            return False
        self._refresh_waiting_prefixes()  # calc_priority (:4129-4133)
        decoding = [r for r in self.running if r.is_decoding]
        future = sum(self.max_new_estimate(r) * self.new_token_ratio for r in decoding)
        kv = PrefillBudget(self.pool.num_free * self.page, future, self.tree)
        batch: list[tuple[Request, int]] = []
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
        if any(r is self.chunked for r, _ in batch):
            self.batch_is_full = False  # the chunk leaves the filtered prefill batch (scheduler.py:3934-3951)
        self._allocate_extends(batch)
        return bool(batch)

    def _allocate_extends(self, batch: list[tuple[Request, int]]) -> None:
        """``alloc_for_extend``: the radix cache first evicts until the pool holds the batch's
        extends, plus a page a request when pages are larger than a token (allocation.py:175-201,
        :152-157); then each request's pages up to its extend's end."""
        if not batch:
            return
        if self.tree is not None:
            demand = sum(end - r.num_computed_tokens for r, end in batch)
            self.tree.evict(demand + (len(batch) * self.page if self.page > 1 else 0))
        for req, end in batch:
            assert self._allocate(req, end), "the walk admitted more than the pool holds"
            self.alloc_len[req.request_id] = end
            self.prefilled.add(req.request_id)
            if req is self.chunked and self.tree is not None:
                self.stash = req

    def abort_request(self, request_id: str) -> None:
        """As the shared loop: the request leaves at once, its KV released (its lock on the radix
        cache too, nothing inserted: ``release_kv_cache(checkpoint=False)``). An aborted chunked
        request leaves the chunk slot too (``process_pending_chunked_abort``, scheduler.py:3778-3821).
        A decoding one SGLang marks ``to_finish`` (``abort_request``, scheduler.py:5797-5812):
        it runs one more decode, finishes there (``update_finish_state``, schedule_batch.py:2011-2013)
        and leaves the running batch at the next step's ``filter_batch``, which clears
        ``batch_is_full`` (scheduler.py:3964-3968); so the latch is cleared after the next decode
        (``abort_pending``)."""
        req = self.requests[request_id]
        decoding = req.status is Status.RUNNING and req.is_decoding and req is not self.chunked
        super().abort_request(request_id)
        self._forget(req)
        if self.chunked is not None and self.chunked.request_id == request_id:
            self.chunked = None
        if decoding:
            self.abort_pending = True

    def _forget(self, req: Request) -> None:
        """req no longer holds KV: its radix-cache lock and allocated length go."""
        if self.tree is not None:
            self.tree.release(req)
        self.alloc_len.pop(req.request_id, None)

    def _preempt(self, req: Request, front: bool = True) -> None:
        super()._preempt(req, front)
        self._forget(req)

    def _allocate(self, req: Request, tokens: int) -> bool:
        if self.tree is not None:
            self.tree.evict((cdiv(tokens, self.page) - len(req.block_ids)) * self.page)
        return self.pool.allocate(req, tokens, [])

    def _decode_fits(self, reqs: list[Request], retracting: bool) -> bool:
        """``check_decode_mem`` (schedule_batch.py:3432-3449): the policy's check on the free and
        evictable KV; one that fails has evicted all it could first (allocator/base.py:171-185)."""
        fits = self.policy.decode_fits(self, reqs, retracting=retracting)
        if not fits and self.tree is not None:
            self.tree.evict_all()
        return fits

    def _decode(self, step: StepPass) -> None:
        """``update_running_batch``: check, retract, reserve, then grant every decode 1 + k."""
        batch = [r for r in self.running if r.is_decoding]
        if not batch:
            return
        policy = self.policy
        if not self._decode_fits(batch, retracting=False):
            order = policy.retraction_order(batch)
            retracted = 0
            first = True
            while first or not self._decode_fits(order, retracting=True):
                if len(order) == 1:
                    break
                first = False
                victim = order.pop()
                self.running.remove(victim)
                self._preempt(victim, front=False)  # release_req, reset_for_retract, to the back
                if self.tree is not None:  # release_req: the evictable KV is used at once (schedule_batch.py:2389-2392)
                    self.tree.evict(len(order) * RETRACT_DECODE_STEPS)
                step.preempted.append(victim.request_id)
                retracted += 1
            if len(order) == 1 and policy.aborts_last and not self._decode_fits(order, retracting=True):
                last = order.pop()
                self.running.remove(last)
                self.pool.free(last)
                self._forget(last)
                last.status = Status.ABORTED
                self.aborted_in_step.append(last.request_id)
            self.new_token_ratio = self._ratio_after_retract(order)
            self.batch_is_full = False
            batch = order
            kept = set(map(id, order))  # filter_batch(keep_indices=sorted_indices): the batch takes the retraction
            self.running = order + [r for r in self.running if id(r) not in kept]  # order (schedule_batch.py:3532)
        else:
            self.new_token_ratio = max(self.new_token_ratio - NEW_TOKEN_RATIO_DECAY, MIN_NEW_TOKEN_RATIO)
        targets = [policy.decode_target(self, req) for req in batch]
        if self.tree is not None:
            self._evict_for_decode(batch, targets)
        grant = self.alloc_per_decode  # num_draft_tokens verify rows, near max_model_len too (context_headroom)
        for req, target in zip(batch, targets):
            if not self._allocate(req, target):
                self._allocate(req, self.allocated(req) + self.pool.num_free * self.page)  # the pool runs out
            if self.tree is not None:
                rid = req.request_id
                self.alloc_len[rid] = max(self.alloc_len.get(rid, 0), cdiv(target, self.page) * self.page)
            step.record_grant(req, grant, grant - 1, padded=False)
            step.scheduled_running.append(req)
        if self.abort_pending:  # the aborted request decoded with this batch and leaves it
            self.batch_is_full = self.abort_pending = False

    def _ratio_after_retract(self, kept: list[Request]) -> float:
        """``estimate_new_token_ratio_after_retract`` (new_token_ratio_tracker.py:41-49):
        ``min(1, (decoded + 20 * bs) / (sum max_new + 1))`` over the batch kept, max_new being
        ``sampling_params.max_new_tokens``, max_tokens clipped to max_model_len - prompt (the
        tokenizer's rule), not to 4096."""
        decoded = sum(r.num_output_tokens for r in kept)
        max_new = sum(min(r.max_tokens, self.cfg.max_model_len - r.num_prompt_tokens) for r in kept)
        return min(1.0, (decoded + RETRACT_DECODE_STEPS * len(kept)) / (max_new + 1))

    def _evict_for_decode(self, batch: list[Request], targets: list[int]) -> None:
        """``alloc_for_spec_decode`` (allocation.py:780-848): the tokens the batch's allocated
        lengths grow by (``page_aligned_decode_alloc_lens``, allocation_sizing.py:73-93), plus a
        page a request when pages are larger than a token, are made free first."""
        assert self.tree is not None
        page = self.page
        needed = 0
        for req, target in zip(batch, targets):
            have = min(self.alloc_len.get(req.request_id, self.allocated(req)), self.allocated(req))
            needed += max(have, cdiv(target, page) * page) - have
        if needed > 0:
            self.tree.evict(needed + (len(batch) * page if page > 1 else 0))

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

    def _release_finished(self, req: Request) -> None:
        """``release_kv_cache(checkpoint=True)`` (common.py:400-444): with the radix cache, the
        request's pages up to its committed KV (``owned_kv_len``, the tokens but the last
        sampled) go into the tree first; the rest is freed."""
        if self.tree is not None:
            self.tree.checkpoint(req, req.num_tokens - 1)
        self.pool.free(req)
        self._forget(req)

    def _output_kept(self, req: Request, computed_before: int) -> None:
        """A request whose prefill completed and which runs on is checkpointed into the radix
        cache up to its extend's end (``checkpoint_kv_cache``, batch_result_processor.py:393-394)."""
        if req.request_id in self.prefilled:
            assert self.tree is not None
            self.tree.checkpoint(req, req.num_tokens - 1)

    def _loop_state(self) -> tuple[object, ...]:
        """The admission latch, a pending abort, the chunked request and ``new_token_ratio`` (which decays
        at every decode step, so a decoding SGLang step is never a fixpoint until it bottoms out); with
        the radix cache, the changes to its recency order (``RadixCache.recency``), its evictable pages
        and the stashed chunk."""
        own = (self.batch_is_full, self.abort_pending, None if self.chunked is None else self.chunked.request_id,
               self.new_token_ratio)
        if self.tree is None:
            return own
        return (*own, self.tree.recency(), self.tree.evictable_pages,
                None if self.stash is None else self.stash.request_id)
