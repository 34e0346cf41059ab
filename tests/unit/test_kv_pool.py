"""The KV pool costs what the run touches: a huge pool builds and serves in little memory,
and it hands out, caches and evicts blocks exactly as the list-based pool it replaced.

``ListPool`` is that pool as it was (a reference count and a key slot per block, made up
front); both pools run the same random allocate / cache / free sequences.
"""
from __future__ import annotations

import random
import tracemalloc
from collections import OrderedDict, deque

import pytest

from tokenbudget.model.kv_pool import KVBlockPool
from tokenbudget.model.request import Request
from tokenbudget.spec.intlike import cdiv


class ListPool:
    def __init__(self, num_blocks, block_size, enable_prefix_caching, drop_last_hit_block=False):
        self.num_blocks, self.block_size = num_blocks, block_size
        self.enable_prefix_caching, self.drop_last_hit_block = enable_prefix_caching, drop_last_hit_block
        self.next_fresh = 0
        self.reuse_first = deque()
        self.free_queue = OrderedDict()
        self.ref_count = [0] * num_blocks
        self.key_of = [None] * num_blocks
        self.blocks_of_key = {}

    @property
    def num_free(self):
        return len(self.reuse_first) + self.num_blocks - self.next_fresh + len(self.free_queue)

    def find_cached_prefix(self, req):
        if not self.enable_prefix_caching:
            return []
        hits = []
        for index in range((req.num_tokens - 1) // self.block_size):
            copies = self.blocks_of_key.get(req.block_key(index, self.block_size))
            if not copies:
                break
            hits.append(next(iter(copies)))
        return hits[:-1] if self.drop_last_hit_block else hits

    def blocks_needed(self, req, num_tokens, hits):
        new = max(cdiv(num_tokens, self.block_size) - len(req.block_ids) - len(hits), 0)
        return new + sum(1 for b in hits if self.ref_count[b] == 0)

    def allocate(self, req, num_tokens, hits):
        if self.blocks_needed(req, num_tokens, hits) > self.num_free:
            return False
        if hits:
            req.num_cached_blocks = len(hits)
        for block in hits:
            if self.ref_count[block] == 0:
                del self.free_queue[block]
            self.ref_count[block] += 1
            req.block_ids.append(block)
        for _ in range(cdiv(num_tokens, self.block_size) - len(req.block_ids)):
            block = self._pop_free()
            self.ref_count[block] = 1
            req.block_ids.append(block)
        return True

    def _pop_free(self):
        if self.reuse_first:
            return self.reuse_first.popleft()
        if self.next_fresh < self.num_blocks:
            self.next_fresh += 1
            return self.next_fresh - 1
        block, _ = self.free_queue.popitem(last=False)
        key = self.key_of[block]
        if key is not None:
            copies = self.blocks_of_key[key]
            del copies[block]
            if not copies:
                del self.blocks_of_key[key]
            self.key_of[block] = None
        return block

    def cache_full_blocks(self, req, num_tokens):
        if not self.enable_prefix_caching:
            return
        full = min(num_tokens // self.block_size, len(req.block_ids))
        for index in range(req.num_cached_blocks, full):
            block = req.block_ids[index]
            if self.key_of[block] is None:
                key = req.block_key(index, self.block_size)
                self.key_of[block] = key
                self.blocks_of_key.setdefault(key, {})[block] = None
        req.num_cached_blocks = max(req.num_cached_blocks, full)

    def free(self, req):
        without_content = []
        for block in reversed(req.block_ids):
            self.ref_count[block] -= 1
            if self.ref_count[block] > 0:
                continue
            if self.key_of[block] is None:
                without_content.append(block)
            else:
                self.free_queue[block] = None
        self.reuse_first.extendleft(reversed(without_content))
        req.block_ids = []
        req.num_cached_blocks = 0


def run_both(seed):
    """One random sequence on both pools; every observable must agree at every op."""
    rng = random.Random(seed)
    block_size = rng.choice((2, 4))
    args = (rng.randint(4, 24), block_size, rng.random() < 0.8, rng.random() < 0.3)
    pools = (ListPool(*args), KVBlockPool(*args))
    held = ({}, {})
    for n in range(120):
        roll = rng.random()
        if roll < 0.5:
            prompt = rng.randint(1, 30)
            group = rng.choice((None, "sys", "doc"))
            spec = dict(request_id=f"r{n}", num_prompt_tokens=prompt, max_tokens=4, arrival=n, priority=0,
                        prefix_group=group, prefix_len=min(prompt, rng.randint(0, 12)) if group else 0)
            tokens = rng.randint(1, prompt)
            seen = []
            for pool, mine in zip(pools, held):
                req = Request(**spec)
                hits = pool.find_cached_prefix(req)
                ok = pool.allocate(req, max(tokens, len(hits) * block_size), hits)
                if ok:
                    pool.cache_full_blocks(req, tokens)
                    mine[req.request_id] = req
                seen.append((hits, ok, list(req.block_ids), req.num_cached_blocks))
            assert seen[0] == seen[1]
        elif held[0]:
            rid = rng.choice(sorted(held[0]))
            for pool, mine in zip(pools, held):
                pool.free(mine.pop(rid))
        assert pools[0].num_free == pools[1].num_free
        assert list(pools[0].free_queue) == list(pools[1].free_queue)
        assert list(pools[0].reuse_first) == list(pools[1].reuse_first)
        assert pools[1].shared == {b for b, count in enumerate(pools[0].ref_count) if count > 1}


@pytest.mark.parametrize("seed", range(60))
def test_hands_out_caches_and_evicts_as_the_list_pool(seed):
    run_both(seed)


def test_a_huge_pool_costs_what_the_run_touches():
    tracemalloc.start()
    try:
        pool = KVBlockPool(10**12, 16, True)
        reqs = [Request(f"r{i}", 100, 4, i, 0, "sys", 32) for i in range(8)]
        for req in reqs:
            hits = pool.find_cached_prefix(req)
            assert pool.allocate(req, 100, hits)
            pool.cache_full_blocks(req, 100)
        pool.free(reqs[0])
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert pool.num_free == 10**12 - pool.num_in_use
    assert peak < 2**20, f"{peak} bytes for a pool of 10^12 blocks"


def test_a_block_table_follows_every_change_of_the_blocks():
    """``Request.block_table`` reuses its tuple while the blocks stay; a request cut back and
    grown to the same length again, on other blocks, must not read the old one."""
    pool = KVBlockPool(16, 4, False)
    req = Request("r", 40, 4, 0)
    assert pool.allocate(req, 16, [])
    before = req.block_table()
    assert before == tuple(req.block_ids) and req.block_table() is before
    pool.free_tail(req, 2)  # no read in between: the blocks are back to four when next read
    assert pool.allocate(req, 16, [])
    after = req.block_table()
    assert after == tuple(req.block_ids) and len(after) == len(before) and after != before
