"""KVBlockPool: a paged KV block pool with reference counts and a content-keyed prefix cache.

Mirrors vLLM's block pool: free blocks sit in an LRU queue (the head is evicted
first); a freed block keeps its content key, so a later request with the same prefix
can take it back until it is evicted. A request's blocks are freed tail first, so its
last blocks are evicted first. Never-used blocks sit at the head of vLLM's queue in id
order; here they are a counter (``next_fresh``), so a large pool costs nothing to build.
"""
from __future__ import annotations

from collections import OrderedDict
from typing import Hashable

from .intlike import cdiv
from .request import Request


class KVBlockPool:
    def __init__(self, num_blocks: int, block_size: int, enable_prefix_caching: bool) -> None:
        self.num_blocks = num_blocks
        self.block_size = block_size
        self.enable_prefix_caching = enable_prefix_caching
        self.next_fresh = 0  # blocks >= next_fresh were never handed out
        self.free_queue: OrderedDict[int, None] = OrderedDict()  # freed blocks, least recently freed first
        self.ref_count = [0] * num_blocks
        self.key_of: list[Hashable | None] = [None] * num_blocks
        self.block_of_key: dict[Hashable, int] = {}

    @property
    def num_free(self) -> int:
        """Blocks that can be handed out now (never used, free, or cached but unreferenced)."""
        return self.num_blocks - self.next_fresh + len(self.free_queue)

    @property
    def num_in_use(self) -> int:
        return self.next_fresh - len(self.free_queue)

    def find_cached_prefix(self, req: Request) -> list[int]:
        """Blocks of the longest cached prefix of req, never covering its last token."""
        if not self.enable_prefix_caching:
            return []
        hits: list[int] = []
        for index in range((req.num_tokens - 1) // self.block_size):
            block = self.block_of_key.get(req.block_key(index, self.block_size))
            if block is None:
                break
            hits.append(block)
        return hits

    def blocks_needed(self, req: Request, num_tokens: int, hits: list[int]) -> int:
        """Free blocks req must take so that it holds ``num_tokens`` slots after adopting hits."""
        new = max(cdiv(num_tokens, self.block_size) - len(req.block_ids) - len(hits), 0)
        return new + sum(1 for b in hits if self.ref_count[b] == 0)

    def allocate(self, req: Request, num_tokens: int, hits: list[int]) -> bool:
        """Give req the hit blocks and enough new blocks for ``num_tokens`` slots, or nothing."""
        if self.blocks_needed(req, num_tokens, hits) > self.num_free:
            return False
        if hits:  # hit blocks carry their keys already
            assert not req.block_ids, "prefix hits are only adopted by a request holding no blocks"
            req.num_cached_blocks = len(hits)
        for block in hits:
            if self.ref_count[block] == 0:
                del self.free_queue[block]
            self.ref_count[block] += 1
            req.block_ids.append(block)
        for _ in range(cdiv(num_tokens, self.block_size) - len(req.block_ids)):
            if self.next_fresh < self.num_blocks:
                block = self.next_fresh
                self.next_fresh += 1
            else:
                block, _ = self.free_queue.popitem(last=False)
                key = self.key_of[block]
                if key is not None:  # evict the cached content
                    del self.block_of_key[key]
                    self.key_of[block] = None
            self.ref_count[block] = 1
            req.block_ids.append(block)
        return True

    def cache_full_blocks(self, req: Request, num_tokens: int) -> None:
        """Publish the content keys of req's blocks fully covered by its first num_tokens tokens."""
        if not self.enable_prefix_caching:
            return
        full = min(num_tokens // self.block_size, len(req.block_ids))
        for index in range(req.num_cached_blocks, full):
            block = req.block_ids[index]
            key = req.block_key(index, self.block_size)
            if self.key_of[block] is None and key not in self.block_of_key:
                self.key_of[block] = key
                self.block_of_key[key] = block
        req.num_cached_blocks = max(req.num_cached_blocks, full)

    def free(self, req: Request) -> None:
        """Drop req's references, tail first; unreferenced blocks join the free queue."""
        for block in reversed(req.block_ids):
            self.ref_count[block] -= 1
            assert self.ref_count[block] >= 0, f"block {block} freed twice"
            if self.ref_count[block] == 0:
                self.free_queue[block] = None
        req.block_ids = []
        req.num_cached_blocks = 0
