"""RadixCache: SGLang's radix tree of cached KV pages (``UnifiedRadixCache`` with its FULL
component only, mem_cache/unified_radix_cache.py and mem_cache/unified_cache/unified_tree_core.py
at v0.5.23), over the model's ``KVBlockPool``."""
from __future__ import annotations

import heapq
from typing import Hashable, Optional

from ..kv_pool import KVBlockPool
from ..request import Request

_ANCESTOR_STEP = 0.00001  # unified_tree_core.py:1033


class RadixNode:
    __slots__ = ("parent", "children", "keys", "blocks", "lock_ref", "time")

    def __init__(self, parent: Optional["RadixNode"], keys: list[Hashable], blocks: list[int], time: float) -> None:
        self.parent = parent
        self.children: dict[Hashable, RadixNode] = {}
        self.keys = keys
        self.blocks = blocks
        self.lock_ref = 0
        self.time = time

    def __lt__(self, other: "RadixNode") -> bool:  # UnifiedTreeNode.__lt__ (unified_tree_core.py:175-176)
        return self.time < other.time


class RadixCache:
    def __init__(self, pool: KVBlockPool, lookahead: int) -> None:
        self.pool = pool
        self.page = pool.block_size
        self.lookahead = lookahead  # 1 with EAGLE's bigram keys
        self.clock = 0.0
        self.root = RadixNode(None, [], [], self._tick())
        self.order_changes = 0  # ``recency``
        self._top: list[RadixNode] = []  # the most recent nodes, most recent first, as far as known
        self._touched: list[RadixNode] = []  # the nodes given a time since ``recency`` last read, in time order
        self.evictable_pages = 0
        self.lock_of: dict[str, RadixNode] = {}  # request id -> the node its lock sits on
        self.protected: dict[str, int] = {}  # request id -> pages of its row the tree owns (cache_protected_len)

    def _tick(self) -> float:
        now = self.clock
        self.clock += 1.0
        return now

    def _new_node(self, parent: Optional[RadixNode], keys: list[Hashable], blocks: list[int]) -> RadixNode:
        node = RadixNode(parent, keys, blocks, self._tick())
        self._tick()  # creation_time
        self._touched.append(node)
        return node

    # -- keys ---------------------------------------------------------------------------
    def pages_keyed(self, tokens: int) -> int:
        """Whole pages ``tokens`` tokens key (one fewer token with the bigram view)."""
        return max(tokens - self.lookahead, 0) // self.page

    def keys(self, req: Request, pages: int) -> list[Hashable]:
        return [req.block_key(i, self.page, self.lookahead) for i in range(pages)]

    @property
    def evictable_tokens(self) -> int:
        return self.evictable_pages * self.page

    # -- the walk ---------------------------------------------------------------------------
    def _common(self, node: RadixNode, keys: list[Hashable], start: int) -> int:
        n = 0
        limit = min(len(node.keys), len(keys) - start)
        while n < limit and node.keys[n] == keys[start + n]:
            n += 1
        return n

    def _split(self, child: RadixNode, pages: int) -> RadixNode:
        """``_split_node``: the first ``pages`` of child become its new parent."""
        parent = child.parent
        assert parent is not None
        head = self._new_node(parent, child.keys[:pages], child.blocks[:pages])
        head.lock_ref = child.lock_ref
        head.children = {child.keys[pages]: child}
        parent.children[child.keys[0]] = head
        child.parent = head
        child.keys, child.blocks = child.keys[pages:], child.blocks[pages:]
        child.time = self._tick()
        self._touched.append(child)
        return head

    def match(self, keys: list[Hashable]) -> tuple[RadixNode, list[int]]:
        """The deepest node on keys' cached path and the blocks of that path."""
        if not keys:
            return self.root, []
        node, blocks, i = self.root, [], 0
        while i < len(keys) and keys[i] in node.children:
            child = node.children[keys[i]]
            n = self._common(child, keys, i)
            if n < len(child.keys):
                node = self._split(child, n)
                blocks += node.blocks
                break
            node = child
            blocks += child.blocks
            i += n
        time, walk, path = self._tick(), node, []
        while walk is not None:
            walk.time = time
            time -= _ANCESTOR_STEP
            path.append(walk)
            walk = walk.parent
        self._touched += reversed(path[:-1])  # oldest first; the root is never evicted: no part of the order
        return node, blocks

    def insert(self, req: Request, keys: list[Hashable], prev_pages: int) -> RadixNode:
        """Insert req's first ``len(keys)`` pages; the node the insert ended on."""
        self._tick()  # the root's touch
        node, i, pool = self.root, 0, self.pool
        table = req.block_ids
        adopted = False
        while i < len(keys) and keys[i] in node.children:
            child = node.children[keys[i]]
            child.time = self._tick()
            self._touched.append(child)
            n = self._common(child, keys, i)
            if n < len(child.keys):
                child = self._split(child, n)
            for j in range(max(prev_pages, i), i + n):  # the request's duplicate pages: the tree's serve
                if not adopted:
                    table, adopted = list(table), True
                pool.drop(table[j])
                table[j] = child.blocks[j - i]
                pool.hold(table[j])
            node, i = child, i + n
        if adopted:
            req.block_ids = table  # a new list: Request.block_table
        if i < len(keys):
            leaf = self._new_node(node, keys[i:], table[i:len(keys)])
            for block in leaf.blocks:
                pool.hold(block)
            node.children[keys[i]] = leaf
            self.evictable_pages += len(leaf.keys)
            node = leaf
        return node

    # -- locks ------------------------------------------------------------------------------
    def lock(self, node: RadixNode) -> None:
        while node is not self.root:
            if node.lock_ref == 0:
                self.evictable_pages -= len(node.keys)
            node.lock_ref += 1
            assert node.parent is not None
            node = node.parent

    def unlock(self, node: RadixNode) -> None:
        while node is not self.root:
            assert node.lock_ref > 0
            node.lock_ref -= 1
            if node.lock_ref == 0:
                self.evictable_pages += len(node.keys)
            assert node.parent is not None
            node = node.parent

    # -- requests ---------------------------------------------------------------------------
    def adopt(self, req: Request, node: RadixNode, blocks: list[int]) -> None:
        """An admitted request takes its matched prefix (``match_kv_cache``, common.py:221-268)
        and a lock on it (``_commit_prefill_admission``, schedule_policy.py:1685-1691)."""
        assert not req.block_ids
        if blocks:
            for block in blocks:
                self.pool.hold(block)
            req.block_ids = list(blocks)
        self.lock(node)
        self.lock_of[req.request_id] = node
        self.protected[req.request_id] = len(blocks)

    def checkpoint(self, req: Request, up_to: int) -> None:
        """``checkpoint_into_tree`` (unified_radix_cache.py:1164-1318): insert the pages of req's
        first ``up_to`` tokens, split the leaf at the prompt's last keyed page (:1257-1282), move
        req's lock onto the node the insert ended on."""
        rid = req.request_id
        pages = min(self.pages_keyed(up_to), len(req.block_ids))
        if pages <= 0:
            return
        keys = self.keys(req, pages)
        node = self.insert(req, keys, self.protected.get(rid, 0))
        prompt = self.pages_keyed(req.num_prompt_tokens)
        if 0 < prompt < pages:
            self.insert(req, keys[:prompt], prompt)
        old = self.lock_of.get(rid)
        if old is not None:
            self.unlock(old)
        self.lock(node)
        self.lock_of[rid] = node
        self.protected[rid] = pages

    def release(self, req: Request) -> None:
        """req's lock is given back (``release_kv_cache``, common.py:400-444); its blocks are
        the pool's to free."""
        node = self.lock_of.pop(req.request_id, None)
        if node is not None:
            self.unlock(node)
        self.protected.pop(req.request_id, None)

    # -- eviction -------------------------------------------------------------------------
    def _is_leaf(self, node: RadixNode) -> bool:
        return node is not self.root and node.lock_ref == 0 and not node.children

    def evict(self, free_tokens: int) -> None:
        """Evict least-recent unlocked leaves until the pool has ``free_tokens`` free
        (``evict_to_free_tokens``, allocator/base.py:155-169)."""
        pool, page = self.pool, self.page
        if pool.num_free * page >= free_tokens or not self.evictable_pages:
            return
        heap = [(n.time, n) for n in self._leaves()]
        heapq.heapify(heap)
        evicted: set[RadixNode] = set()
        while heap and pool.num_free * page < free_tokens:
            _, node = heapq.heappop(heap)
            if not self._is_leaf(node):
                continue
            parent = node.parent
            assert parent is not None
            del parent.children[node.keys[0]]
            evicted.add(node)
            self.evictable_pages -= len(node.keys)
            for block in node.blocks:
                pool.drop(block)
            if self._is_leaf(parent):
                heapq.heappush(heap, (parent.time, parent))
        if evicted:  # the order loses them; what is known of its top stays known
            self.order_changes += 1
            self._top = [n for n in self._top if n not in evicted]
            self._touched = [n for n in self._touched if n not in evicted]

    def evict_all(self) -> None:
        self.evict(self.pool.num_blocks * self.page + 1)

    def _leaves(self) -> list[RadixNode]:
        out, stack = [], [self.root]
        while stack:
            node = stack.pop()
            if self._is_leaf(node):
                out.append(node)
            stack.extend(node.children.values())
        return out

    # -- recency ----------------------------------------------------------------------------
    def recency(self) -> int:
        """A count of the changes to the tree's recency order (its nodes but the root by time:
        what LRU evicts first), not the clock the times are read on. The nodes given a time
        since the last read (matched, walked by an insert, created) changed it unless, most
        recent first, they are the most recent nodes already, in that order: re-matching the
        path matched last, or a waiting-prefix refresh over the paths it refreshed last,
        changes nothing; an eviction always does. Costs the nodes timed since, and the known
        top of the order when it changed."""
        if self._touched:
            latest: dict[RadixNode, None] = {}
            for node in self._touched:
                latest.pop(node, None)
                latest[node] = None
            top = list(reversed(latest))
            if top != self._top[:len(top)]:
                self.order_changes += 1
                self._top = top + [n for n in self._top if n not in latest]  # the rest keep their order
            self._touched = []
        return self.order_changes

    def state(self) -> tuple[object, ...]:
        """The tree as a value: every node's keys, lock count and time, depth first."""
        out: list[object] = []
        stack = [self.root]
        while stack:
            node = stack.pop()
            out.append((tuple(node.keys), node.lock_ref, node.time))
            stack.extend(node.children[k] for k in sorted(node.children, key=repr))
        return tuple(out)
