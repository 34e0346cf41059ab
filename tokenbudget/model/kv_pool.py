"""KVBlockPool: a paged KV block pool with reference counts and a content-keyed prefix cache."""
from __future__ import annotations

from collections import OrderedDict, deque
from typing import Hashable

from ..spec.intlike import cdiv
from .request import Request


class KVBlockPool:
    def __init__(self, num_blocks: int, block_size: int, enable_prefix_caching: bool,
                 drop_last_hit_block: bool = False, hash_lookahead: int = 0) -> None:
        """``drop_last_hit_block``: every prefix-cache hit gives back its last block, as
        vLLM 0.32 does for the methods that draft from the target's hidden states (EAGLE, MTP,
        DFlash, DSpark): the drafter's KV of the last hit block may hold a token past it.
        ``hash_lookahead``: a block's key also covers that many tokens after it, so a block
        is cached only once they exist (vLLM 0.33's lookahead block hashes)."""
        self.num_blocks = num_blocks
        self.block_size = block_size
        self.enable_prefix_caching = enable_prefix_caching
        self.drop_last_hit_block = drop_last_hit_block
        self.hash_lookahead = hash_lookahead
        self.next_fresh = 0  # blocks >= next_fresh were never handed out
        self.reuse_first: deque[int] = deque()  # freed blocks without content, the head first
        self.free_queue: OrderedDict[int, None] = OrderedDict()  # freed keyed blocks, least recently freed first
        self.ref_count: dict[int, int] = {}  # blocks some request holds -> how many hold them
        self.shared: set[int] = set()  # blocks more than one request holds
        self.key_of: dict[int, Hashable] = {}  # blocks that carry a content key
        self.blocks_of_key: dict[Hashable, dict[int, None]] = {}  # every copy, the oldest first

    @property
    def num_free(self) -> int:
        """Blocks that can be handed out now (never used, free, or cached but unreferenced)."""
        return len(self.reuse_first) + self.num_blocks - self.next_fresh + len(self.free_queue)

    @property
    def num_in_use(self) -> int:
        return self.num_blocks - self.num_free

    def find_cached_prefix(self, req: Request) -> list[int]:
        """Blocks of the longest cached prefix of req, never covering its last token
        (less the last block with ``drop_last_hit_block``)."""
        if not self.enable_prefix_caching:
            return []
        hits: list[int] = []
        for index in range((req.num_tokens - 1) // self.block_size):
            copies = self.blocks_of_key.get(req.block_key(index, self.block_size, self.hash_lookahead))
            if not copies:
                break
            hits.append(next(iter(copies)))
        return hits[:-1] if self.drop_last_hit_block else hits

    def blocks_needed(self, req: Request, num_tokens: int, hits: list[int]) -> int:
        """Free blocks req must take so that it holds ``num_tokens`` slots after adopting hits."""
        new = max(cdiv(num_tokens, self.block_size) - len(req.block_ids) - len(hits), 0)
        if not hits:
            return new
        return new + sum(1 for b in hits if b not in self.ref_count)

    def allocate(self, req: Request, num_tokens: int, hits: list[int]) -> bool:
        """Give req the hit blocks and enough new blocks for ``num_tokens`` slots, or nothing."""
        if not hits and cdiv(num_tokens, self.block_size) <= len(req.block_ids):
            return True  # it holds them already: most calls, a decode between block boundaries
        if self.blocks_needed(req, num_tokens, hits) > self.num_free:
            return False
        block_ids, ref_count = req.block_ids, self.ref_count
        if hits:  # hit blocks carry their keys already
            assert not block_ids, "prefix hits are only adopted by a request holding no blocks"
            req.num_cached_blocks = len(hits)
        for block in hits:
            if block not in ref_count:
                del self.free_queue[block]
            count = ref_count.get(block, 0) + 1
            ref_count[block] = count
            if count == 2:
                self.shared.add(block)
            block_ids.append(block)
        for _ in range(cdiv(num_tokens, self.block_size) - len(block_ids)):
            block = self._pop_free()
            ref_count[block] = 1
            block_ids.append(block)
        return True

    def _pop_free(self) -> int:
        """The block at the head of the free queue, its cached content evicted."""
        if self.reuse_first:
            return self.reuse_first.popleft()
        if self.next_fresh < self.num_blocks:
            self.next_fresh += 1
            return self.next_fresh - 1
        block, _ = self.free_queue.popitem(last=False)
        key = self.key_of.pop(block, None)
        if key is not None:
            copies = self.blocks_of_key[key]
            del copies[block]
            if not copies:
                del self.blocks_of_key[key]
        return block

    def cache_full_blocks(self, req: Request, num_tokens: int) -> None:
        """Publish the content keys of req's blocks fully covered by its first num_tokens tokens."""
        full = num_tokens // self.block_size
        if full <= req.num_cached_blocks or not self.enable_prefix_caching:
            return
        full = min(full, len(req.block_ids), (req.num_tokens - self.hash_lookahead) // self.block_size)
        for index in range(req.num_cached_blocks, full):
            block = req.block_ids[index]
            if block not in self.key_of:
                key = req.block_key(index, self.block_size, self.hash_lookahead)
                self.key_of[block] = key
                self.blocks_of_key.setdefault(key, {})[block] = None
        req.num_cached_blocks = max(req.num_cached_blocks, full)

    def hold(self, block: int) -> None:
        """One more reference on a held block (SGLang's radix tree shares its pages so)."""
        count = self.ref_count[block] + 1
        self.ref_count[block] = count
        if count == 2:
            self.shared.add(block)

    def drop(self, block: int) -> None:
        """One reference fewer on a block; unreferenced, it goes to the head of the free queue."""
        count = self.ref_count[block] - 1
        assert count >= 0, f"block {block} freed twice"
        if count:
            self.ref_count[block] = count
            if count == 1:
                self.shared.discard(block)
            return
        del self.ref_count[block]
        self.reuse_first.appendleft(block)

    def free(self, req: Request) -> None:
        """Drop req's references, tail first. Unreferenced blocks without content go to the
        head of the free queue (the tail block first), keyed ones to its end."""
        self.free_tail(req, 0)

    def free_tail(self, req: Request, keep: int) -> None:
        """Drop req's references to its blocks past the first ``keep``, as ``free`` drops all."""
        without_content: list[int] = []
        for block in reversed(req.block_ids[keep:]):
            count = self.ref_count.get(block, 0) - 1
            assert count >= 0, f"block {block} freed twice"
            if count > 0:
                self.ref_count[block] = count
                if count == 1:
                    self.shared.discard(block)
                continue
            del self.ref_count[block]
            if block not in self.key_of:
                without_content.append(block)
            else:
                self.free_queue[block] = None
        self.reuse_first.extendleft(reversed(without_content))
        req.block_ids = req.block_ids[:keep]  # a new list, never a shortened one: Request.block_table
        req.num_cached_blocks = min(req.num_cached_blocks, keep)
