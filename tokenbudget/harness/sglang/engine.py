"""Drive SGLang 0.5.23's scheduler code on the CPU, one scheduler step at a time."""
from __future__ import annotations

import hashlib
import mmap
import types
from array import array
from pathlib import Path
from typing import Any, Hashable, Mapping, Optional

from ...model.sglang.loop import SglangLoop, max_req_len
from ...spec.records import RequestState
from ...spec.target import describe
from ..observed_step import ObservedStep
from . import runtime


class _Tokens:
    """Token ids: a prefix group's first tokens are the group's, every other token (a prompt's
    own, an output) is new, so the radix tree shares exactly what ``Request.block_key`` shares."""

    def __init__(self) -> None:
        self.next = 1
        self.groups: dict[str, list[int]] = {}

    def fresh(self, n: int) -> list[int]:
        self.next += n
        return list(range(self.next - n, self.next))

    def prompt(self, group: Optional[str], shared: int, length: int) -> array:
        ids = self.groups.setdefault(group, []) if group is not None else []
        if len(ids) < shared:
            ids += self.fresh(shared - len(ids))
        return array("q", ids[:shared] + self.fresh(length - shared))


class _NoSampling:
    """The sampling tensors ``filter_batch`` narrows: none here (no model runs)."""

    def filter_batch(self, *args: object, **kwargs: object) -> None:
        return None


def _lazy_req_to_token_pool(sg: Mapping[str, Any], size: int, row: int) -> Any:
    """SGLang's ``ReqToTokenPool(size, row, "cpu", False)``, the same table of zeros, resident only
    where a run writes: SGLang's ``torch.zeros`` writes every page (mem_cache/memory_pool.py:406-408
    at v0.5.23), a private anonymous mapping reads as zeros and maps a page at its first write."""
    pool = sg["ReqToTokenPool"](size, 1, "cpu", False)
    small = pool.req_to_token
    zeros = mmap.mmap(-1, small.shape[0] * row * small.element_size(), flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    pool.req_to_token = sg["torch"].frombuffer(zeros, dtype=small.dtype).view(small.shape[0], row)
    pool.max_context_len = row  # the constructor's one other use of max_context_len
    return pool


class SglangEngine:
    """One deployment of SGLang's scheduler state for ``cfg`` (its page size, the radix cache
    on with ``enable_prefix_caching``, EAGLE topk 1 with k drafts). Raises SglangUnavailable
    without SGLang."""

    def __init__(self, cfg: Any, path: Path | None = None) -> None:
        sg = runtime.load(path)
        self.sg, self.cfg, self.torch = sg, cfg, sg["torch"]
        torch = self.torch
        self.k = cfg.num_speculative_tokens
        self.page = cfg.block_size
        self.max_running = cfg.max_num_seqs
        self.chunk = cfg.max_num_batched_tokens if cfg.enable_chunked_prefill else None  # None: chunking off
        self.radix = cfg.enable_prefix_caching  # SGLang's disable_radix_cache = not enable_prefix_caching
        args = sg["ServerArgs"](
            model_path="tokenbudget-fake", device="cpu", disable_radix_cache=not self.radix, page_size=self.page,
            max_running_requests=self.max_running, chunked_prefill_size=self.chunk if self.chunk else -1,
            max_prefill_tokens=cfg.max_num_batched_tokens, context_length=cfg.max_model_len,
            speculative_algorithm="EAGLE" if self.k else None, speculative_num_steps=self.k or None,
            speculative_eagle_topk=1 if self.k else None, speculative_num_draft_tokens=self.k + 1 if self.k else None,
        )
        sg["runtime_context"]._CONTEXT.set_server_args(args)
        tokens = cfg.num_kv_blocks * self.page
        row = cfg.max_model_len + sg["allocation_sizing"].get_req_to_token_extra_context_len()  # as SGLang sizes it
        self.req_to_token_pool = _lazy_req_to_token_pool(sg, self.max_running, row)
        if self.page == 1:
            self.allocator = sg["TokenToKVPoolAllocator"](tokens, torch.float16, "cpu", None, False)
        else:
            self.allocator = sg["PagedTokenToKVPoolAllocator"](tokens, self.page, torch.float16, "cpu", None, False)
        self.spec_algorithm = sg["SpeculativeAlgorithm"].from_string("EAGLE" if self.k else None)
        params = sg["CacheInitParams"](disable=not self.radix, req_to_token_pool=self.req_to_token_pool,
                                       token_to_kv_pool_allocator=self.allocator, page_size=self.page,
                                       is_eagle=self.spec_algorithm.is_eagle())
        params.tree_components = (sg["ComponentType"].FULL,)  # create_unified_radix_cache (registry.py:149-158)
        self.tree_cache = sg["UnifiedRadixCache"](params)
        self.policy = sg["schedule_policy"].SchedulePolicy("fcfs", self.tree_cache, False, False, False)
        self.tokens = _Tokens()
        self.ratio = sg["NewTokenRatioTracker"].from_config()
        self.reqs: dict[str, Any] = {}
        self.tables: dict[str, tuple[int, ...]] = {}  # each request's last block table, shared by records while equal
        self.page_keys: dict[tuple[str, int], bytes] = {}  # (request, full page index) -> ``_tokens_to_page_end``
        self.max_tokens: dict[str, int] = {}
        self.waiting: list[Any] = []
        self.running: list[Any] = []
        self.chunked: Any = None
        self.batch_is_full = False
        self.abort_pending = False  # an aborted running request SGLang decodes once more
        self.aborted: set[str] = set()
        self.dead: Optional[str] = None

    def close(self) -> None:
        """Free SGLang's pools, tree and requests now; the engine takes no more calls."""
        vars(self.tree_cache).clear()  # the tree is in cycles (its components, its session) and holds the pools
        vars(self).clear()

    # -- requests ---------------------------------------------------------------------
    def add(self, rid: str, prompt_len: int, max_tokens: int, prefix_group: Optional[str] = None,
            prefix_len: int = 0) -> None:
        """Queue a request whose first ``prefix_len`` tokens are its prefix group's."""
        if prompt_len > SglangLoop.longest_prompt(self.cfg):  # validate_input_length (managers/utils.py:272)
            raise ValueError(f"request {rid!r}: SGLang aborts a prompt of {prompt_len} tokens on arrival "
                             f"(max_req_input_len {SglangLoop.longest_prompt(self.cfg) + 1})")
        params = self.sg["SamplingParams"](max_new_tokens=self._max_new_tokens(prompt_len, max_tokens))
        params.normalize(None)
        prompt = self.tokens.prompt(prefix_group, prefix_len if prefix_group is not None else 0, prompt_len)
        req = self.sg["schedule_batch"].Req(rid, "", prompt, params)
        self.reqs[rid], self.max_tokens[rid] = req, max(1, params.max_new_tokens)  # the prefill samples one
        self.waiting.append(req)  # _add_request_to_queue

    def _max_new_tokens(self, prompt_len: int, max_tokens: int) -> int:
        """``init_req_max_new_tokens`` (managers/scheduler.py:2693-2740 at v0.5.23): max_tokens clipped
        to ``max_req_len - input_len - 1`` (:2709-2716; max_req_len, managers/tp_worker.py:568-571),
        then by SGLang's own allocator (``max_new_tokens_for_memory``)."""
        tokens = self.cfg.num_kv_blocks * self.page
        clipped = max(0, min(max_tokens, max_req_len(self.cfg) - prompt_len - 1))
        fitted = self.allocator.max_new_tokens_for_memory(prompt_len, clipped, token_capacity=tokens,
                                                          sliding_window_size=None, chunk_size=self.chunk)
        return 0 if fitted is None else int(fitted)

    def abort(self, rid: str) -> None:
        req = self.reqs.get(rid)
        if req is None or rid in self.aborted or req.finished():
            return
        self.aborted.add(rid)
        if req in self.waiting:
            self.waiting.remove(req)
        if req in self.running:
            self.running.remove(req)
            self.abort_pending = True
        if req is self.chunked:
            self.chunked = None
        self._release(req)

    def _release(self, req: Any, checkpoint: bool = False) -> None:
        if req.kv.holds_kv:
            self.sg["common"].release_kv_cache(req, self.tree_cache, checkpoint=checkpoint)

    # -- one step -----------------------------------------------------------------------
    def step(self, accepted: Mapping[str, int]) -> ObservedStep:
        out = ObservedStep(fingerprint=self.fingerprint())
        if self.dead is not None:
            out.error, out.running = self.dead, ()
            return out
        try:
            if self.chunked is not None and self.chunked.extend_end > self.chunked.prefix_len:
                self.sg["common"].checkpoint_kv_cache(self.chunked, self.tree_cache)  # stash_chunked_request
            batch = self._prefill(out)
            if batch:
                self._run_prefill(batch, out)
            else:
                self._decode(out, accepted)
        except Exception as exc:  # an exception inside SGLang's code: the target is dead after it
            self.dead = out.error = describe(exc)
        if out.running is None:  # no batch ran: the running batch and the pages as they are
            out.running = tuple(r.rid for r in self.running)
            out.kv_blocks_in_use = self._pages_in_use()
        out.running = tuple(rid for rid in out.running if rid not in out.aborted)
        out.waiting = tuple(r.rid for r in self.waiting)
        out.block_keys = self._shared_page_keys(out.block_tables)
        touched = set(out.num_scheduled_tokens) | set(out.preempted) | set(out.aborted)
        out.requests = {rid: self.state(rid) for rid in touched}
        return out

    def fingerprint(self) -> Hashable:
        """The scheduler state as a value: the latch, a pending abort, the chunked request, ``new_token_ratio``,
        the free KV, and each queued request in queue order (committed and allocated KV,
        outputs). Costs the live requests."""
        def state(r: Any) -> tuple[object, ...]:
            return r.rid, r.kv.kv_committed_len, r.kv.kv_allocated_len, len(r.output_ids)

        chunked = None if self.chunked is None else state(self.chunked)
        return (self.batch_is_full, self.abort_pending, chunked, self.ratio.current, self.allocator.available_size(),
                self.tree_cache.evictable_size(), tuple(map(state, self.running)), tuple(map(state, self.waiting)))

    def state(self, rid: str) -> RequestState:
        req = self.reqs[rid]
        if rid in self.aborted:
            status = "aborted"
        elif req.finished():
            status = "finished"
        elif req in self.running or req is self.chunked:
            status = "running"
        else:
            status = "waiting"
        return RequestState(status, req.kv.kv_committed_len, len(req.output_ids), self.max_tokens[rid],
                            len(req.origin_input_ids))

    def _prefill(self, out: ObservedStep) -> list[Any]:
        """The admission walk of ``_get_new_batch_prefill_raw`` (scheduler.py:4079-4310)."""
        policy = self.sg["schedule_policy"]
        if not self.running:
            self.batch_is_full = self.abort_pending = False  # :4093-4096
        if (self.batch_is_full or not self.waiting) and self.chunked is None:  # :4098-4101
            return []
        if self._seats(0) <= 0 and self.chunked is None:  # :4117-4123
            self.batch_is_full = True
            return []
        running_batch = self._batch(self.running)
        self.policy.calc_priority(self.waiting, running_batch)  # :4129-4133 (FCFS: the waiting-prefix refresh)
        adder = policy.PrefillAdder(self.page, self.tree_cache, self.allocator, running_batch, self.ratio.current,
                                    self.cfg.max_num_batched_tokens, self.chunk,
                                    max_running_requests=self.max_running)
        if self.chunked is not None:  # :4185-4193
            self.chunked.init_next_round_input()
            self.chunked = adder.add_chunked_req(self.chunked)
        for req in list(self.waiting):
            if adder.budget_state() == policy.AddReqResult.OTHER:  # :4212
                break
            held = sum(r.kv.holds_kv for r in adder.can_run_list)
            if len(adder.can_run_list) >= self._seats(held):  # :4231-4238
                self.batch_is_full = True
            if self.batch_is_full:
                break
            req.init_next_round_input(self.tree_cache)
            res = adder.add_one_req(req, has_chunked_req=self.chunked is not None, truncation_align_size=None)
            if res != policy.AddReqResult.CONTINUE:  # :4279-4300
                if res == policy.AddReqResult.NO_TOKEN:
                    self.batch_is_full = len(adder.can_run_list) > 0 or bool(self.running)
                break
        admitted = set(map(id, adder.can_run_list))
        self.waiting = [r for r in self.waiting if id(r) not in admitted]
        if adder.new_chunked_req is not None:
            self.chunked = adder.new_chunked_req
        return list(adder.can_run_list)

    def _seats(self, held: int) -> int:
        """``get_num_allocatable_reqs`` (scheduler.py:4027-4050)."""
        return min(self.max_running - len(self.running), self.req_to_token_pool.available_size() + held)

    def _run_prefill(self, batch: list[Any], out: ObservedStep) -> None:
        """Allocate each admitted extend (``alloc_for_extend``, allocation.py:374-488: the radix
        cache first evicts for the batch's extends, plus a page a request at pages past one token,
        :175-201; a new request's row starts with its matched prefix, ``_prefix_kv_indices``,
        :363-371), run it; a request whose prompt is done samples a token and is released into the
        tree when finished, checkpointed into it when not (batch_result_processor.py:379-394)."""
        demand = sum(req.extend_end - req.prefix_len for req in batch)
        pages = len(batch) * self.page if self.page > 1 else 0
        self.sg["common"].evict_from_tree_cache(self.tree_cache, demand + pages)
        for req in batch:
            rid = req.rid
            before, end = req.prefix_len, req.extend_end
            out.computed_before[rid] = before
            out.num_tokens[rid] = len(req.origin_input_ids) + len(req.output_ids)
            out.num_scheduled_tokens[rid] = end - before
            out.scheduled_draft_tokens[rid] = 0
            out.prefill.add(rid)
            if not req.kv.holds_kv:
                if self.req_to_token_pool.alloc([req]) is None:
                    raise RuntimeError(f"req_to_token_pool has no row for {rid}")
                if before:
                    prefix = self.tree_cache.prefix_device_indices(req)
                    self.req_to_token_pool.write((req.kv.req_pool_idx, slice(0, before)), prefix.to(self.torch.int32))
                req.kv.kv_allocated_len = before
            self._grow(req, end)
            req.kv.kv_committed_len = end
        out.block_tables = {r.rid: self._pages(r) for r in batch}  # what the step wrote to, before any release
        out.kv_blocks_in_use = self._pages_in_use()
        out.running = tuple(r.rid for r in self.running) + tuple(r.rid for r in batch)  # the batch merges in
        for req in batch:
            if req is self.chunked:
                continue  # a chunk: nothing sampled, checkpointed at the next step's start
            self._commit(req, 1, prefill=True)
            if not req.finished():
                self.sg["common"].checkpoint_kv_cache(req, self.tree_cache)
                self.running.append(req)  # the prefill batch merges into the running batch
        if any(req is self.chunked or req.finished() for req in batch):
            self.batch_is_full = False  # the filtered prefill batch shrank (scheduler.py:3938-3950)

    def _decode(self, out: ObservedStep, accepted: Mapping[str, int]) -> None:
        """``update_running_batch`` (scheduler.py:4459-4550), then the verify."""
        if not self.running:
            self.batch_is_full = False
            return
        batch = self._batch(self.running)
        initial = len(self.running)
        if not batch.check_decode_mem():
            retracted, ratio, to_abort = batch.retract_decode()
            self.ratio.current = ratio
            out.preempted = tuple(r.rid for r in retracted)
            out.aborted = tuple(r.rid for r in to_abort)
            self.aborted.update(out.aborted)
            self.waiting.extend(retracted)  # _add_request_to_queue(is_retracted=True): the back
            self.running = list(batch.reqs)
        else:
            self.ratio.decay_step()
        if len(self.running) < initial:
            self.batch_is_full = False
        sizing = self.sg["allocation_sizing"]
        reserve = sizing.get_alloc_reserve_per_decode()
        _, nxt, needed = sizing.page_aligned_decode_alloc_lens(self.running, reserve=reserve, page_size=self.page)
        if needed > 0:  # alloc_for_spec_decode (allocation.py:793-834): the radix cache evicts for it first
            extra = len(self.running) * self.page if self.page > 1 else 0
            self.sg["common"].evict_from_tree_cache(self.tree_cache, needed + extra)
        rows = 1 + self.k  # num_draft_tokens verify rows a request
        for req, target in zip(self.running, nxt):
            rid = req.rid
            out.computed_before[rid] = req.kv.kv_committed_len
            out.num_tokens[rid] = len(req.origin_input_ids) + len(req.output_ids)
            out.num_scheduled_tokens[rid] = rows
            out.scheduled_draft_tokens[rid] = rows - 1
            self._grow(req, target)
        if self.abort_pending:  # the aborted request ran this decode and leaves at the next filter_batch
            self.batch_is_full = self.abort_pending = False
        out.block_tables = {r.rid: self._pages(r) for r in self.running}
        out.kv_blocks_in_use = self._pages_in_use()
        out.running = tuple(r.rid for r in self.running)
        for req in list(self.running):
            self._commit(req, 1 + min(max(0, accepted.get(req.rid, 0)), self.k))
            if req.finished():
                self.running.remove(req)
                self.batch_is_full = False

    # -- the fake model runner and allocation --------------------------------------------
    def _commit(self, req: Any, tokens: int, prefill: bool = False) -> None:
        """Append ``tokens`` sampled tokens (up to max_new); release a finished request's KV."""
        room = req.sampling_params.max_new_tokens - len(req.output_ids)
        kept = max(0, min(tokens, room))
        if not prefill:
            req.kv.kv_committed_len += kept  # a verify writes the KV of the tokens it keeps
        req.output_ids.extend(self.tokens.fresh(kept))
        if len(req.output_ids) >= req.sampling_params.max_new_tokens:
            req.finished_reason = self.sg["schedule_batch"].FINISH_LENGTH(length=req.sampling_params.max_new_tokens)
            self._release(req, checkpoint=True)

    def _grow(self, req: Any, length: int) -> None:
        """Give the request KV slots up to ``length`` tokens (whole pages), in its row."""
        have = req.kv.kv_allocated_len
        first, last = -(-have // self.page), -(-length // self.page)
        row = self.req_to_token_pool.req_to_token.shape[1]
        if last * self.page > row:  # CUDA's assign kernel writes on past the row; CPU torch drops or raises
            raise IndexError(f"req_to_token row of {row} positions written to {last * self.page} for {req.rid} "
                             f"(get_req_to_token_extra_context_len, mem_cache/allocation_sizing.py:96-116)")
        if last > first:
            slots = self.allocator.alloc((last - first) * self.page)
            if slots is None:
                raise RuntimeError(f"KV allocation of {(last - first) * self.page} tokens for {req.rid} failed: "
                                   f"{self.allocator.available_size()} free (out of memory)")
            self.req_to_token_pool.write((req.kv.req_pool_idx, slice(first * self.page, last * self.page)),
                                         slots.to(self.torch.int32))
        req.kv.kv_allocated_len = max(have, length)

    def _pages_in_use(self) -> int:
        """The pages neither free nor evicted: the requests' and the radix tree's."""
        return self.cfg.num_kv_blocks - self.allocator.available_size() // self.page

    def _shared_page_keys(self, tables: Mapping[str, tuple[int, ...]]) -> dict[int, object]:
        """The pages more than one table holds (the radix tree's shared prefix pages), each keyed
        by the tokens up to its end in the first table that holds it (``_tokens_to_page_end``)."""
        holders: dict[int, tuple[str, int]] = {}
        shared: dict[int, object] = {}
        for rid, table in tables.items():
            for index, page in enumerate(table):
                first = holders.setdefault(page, (rid, index))
                if first[0] != rid and page not in shared:
                    shared[page] = self._tokens_to_page_end(*first)
        return shared

    def _tokens_to_page_end(self, rid: str, index: int) -> bytes:
        """The content key of the request's tokens up to the end of its page ``index``: a digest
        chained page by page (the page's tokens after the key of the page before it), so equal
        keys mean equal tokens and a key costs one page of tokens, not the whole prefix. A full
        page's never changes (a retracted request keeps its tokens): it is built once."""
        known = index
        while known >= 0 and (rid, known) not in self.page_keys:
            known -= 1
        key = self.page_keys[(rid, known)] if known >= 0 else b""
        req = self.reqs[rid]
        for page in range(known + 1, index + 1):
            tokens = _token_range(req, page * self.page, (page + 1) * self.page)
            key = hashlib.blake2b(key + tokens.tobytes(), digest_size=16).digest()
            if len(tokens) < self.page:  # the request's last page, not yet full: its key changes as it fills
                break
            self.page_keys[(rid, page)] = key
        return key

    def _pages(self, req: Any) -> tuple[int, ...]:
        """The request's block table, sharing the last one read (records hold one a step): the
        same tuple while unchanged, its entries while it only grew."""
        n = -(-req.kv.kv_allocated_len // self.page)
        row = self.req_to_token_pool.req_to_token[req.kv.req_pool_idx, : n * self.page : self.page]
        table = tuple(int(x) // self.page for x in row)
        last = self.tables.get(req.rid, ())
        if table[:len(last)] == last:
            table = last + table[len(last):] if len(table) > len(last) else last
        self.tables[req.rid] = table
        return table

    def _batch(self, reqs: list[Any]) -> Any:
        """A ``ScheduleBatch`` over ``reqs`` with the tensors ``filter_batch`` narrows."""
        sb, torch = self.sg["schedule_batch"], self.torch
        batch = sb.ScheduleBatch(reqs=list(reqs), req_to_token_pool=self.req_to_token_pool,
                                 token_to_kv_pool_allocator=self.allocator, tree_cache=self.tree_cache,
                                 spec_algorithm=self.spec_algorithm, device="cpu",
                                 model_config=types.SimpleNamespace(is_encoder_decoder=False))
        batch.req_pool_indices = torch.tensor([r.kv.req_pool_idx or 0 for r in reqs], dtype=torch.int64)
        batch.req_pool_indices_cpu = batch.req_pool_indices.clone()
        batch.seq_lens = torch.tensor([r.kv.kv_committed_len for r in reqs], dtype=torch.int64)
        batch.seq_lens_cpu = batch.seq_lens.clone()
        batch.orig_seq_lens = batch.seq_lens.clone()
        batch.sampling_info = _NoSampling()
        return batch


def _token_range(req: Any, start: int, end: int) -> array:
    """The request's tokens ``start:end`` (its prompt, then its outputs), without copying the rest."""
    prompt = req.origin_input_ids
    tokens = array("q", prompt[start:end])
    if end > len(prompt):
        tokens.extend(req.output_ids[max(0, start - len(prompt)):end - len(prompt)])
    return tokens
