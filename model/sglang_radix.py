"""RadixCache: SGLang's radix tree of cached KV pages (``UnifiedRadixCache`` with its FULL
component only, mem_cache/unified_radix_cache.py and mem_cache/unified_cache/unified_tree_core.py
at v0.5.23), over the model's ``KVBlockPool``.

A node holds a run of whole pages: their content keys (``Request.block_key``, one a page) and
their blocks; its children are keyed by their first page's key. Keys are page-aligned
(``RadixKey.page_aligned``, radix_cache.py:147-151); with EAGLE a key is the bigram view of the
tokens (radix_cache.py:60, :153-164), so a page is keyed by its tokens and the one after it
(``lookahead`` 1) and n tokens key ``(n - 1) // page`` pages.

* ``match`` (``_match_prefix_helper``, unified_tree_core.py:905-984): walk down while the next
  page's key is a child, splitting a node matched part-way (``_split_node``, :1467-1530); the
  node reached and its ancestors get the time ``t, t - 1e-5, ...`` (``_match_post_processor``,
  :1030-1034). An empty key touches nothing (:889-893).
* ``insert`` (``begin_insert`` and its walk, :1129-1465): every node walked is touched, a node
  matched part-way is split, the request's own pages past ``prev_pages`` that the tree already
  holds are freed as duplicates (:1351-1365) and its row points at the tree's pages
  (``checkpoint_into_tree``, unified_radix_cache.py:1286-1298); what is left becomes a new leaf.
* times: each node is created with the next tick (``UnifiedTreeNode.__init__`` takes two,
  unified_tree_core.py:126-127), a touch takes one (``_touch_node``, :1096-1097), a split gives the
  deeper half a fresh one (:1524); ``get_and_increase_time_counter`` (components/base.py:161-165).
* locks (``acquire_component_lock`` / ``release_component_lock``, components/full.py:282-376):
  a lock counts on the node and every ancestor; a node with a lock is protected, one without is
  evictable (``evictable_size``).
* ``evict`` (``_evict_components``, unified_radix_cache.py:952-1058, with ``evict_for_alloc``'s
  target, :697-743): while the free pool is below the target, the unlocked childless node of the
  least time (``LRUStrategy``, evict_policy.py:16-18; the heap of ``full.py:209-244``) leaves the
  tree and its pages are freed (``_delete_unbacked_device_leaf``, unified_tree_core.py:1903-1929);
  its parent, childless and unlocked now, joins the candidates.

The tree holds one reference on each of its blocks and a request one on each block of its row,
so a block returns to the pool when neither holds it. Not modelled: hierarchical caching, the
session cache, eviction policies but LRU, node priorities (only PriorityStrategy reads them).
"""
from __future__ import annotations

import heapq
from typing import Hashable, Optional

from .kv_pool import KVBlockPool
from .request import Request

_ANCESTOR_STEP = 0.00001  # unified_tree_core.py:1033


class RadixNode:
    __slots__ = ("parent", "children", "keys", "blocks", "lock_ref", "time", "serial")

    def __init__(self, parent: Optional["RadixNode"], keys: list[Hashable], blocks: list[int], time: float,
                 serial: int) -> None:
        self.serial = serial  # the node's identity in ``recency``: one a node created, never reused
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
        self.nodes_created = 0
        self.root = RadixNode(None, [], [], self._tick(), 0)
        self.evictable_pages = 0
        self.lock_of: dict[str, RadixNode] = {}  # request id -> the node its lock sits on
        self.protected: dict[str, int] = {}  # request id -> pages of its row the tree owns (cache_protected_len)

    def _tick(self) -> float:
        now = self.clock
        self.clock += 1.0
        return now

    def _new_node(self, parent: Optional[RadixNode], keys: list[Hashable], blocks: list[int]) -> RadixNode:
        self.nodes_created += 1
        node = RadixNode(parent, keys, blocks, self._tick(), self.nodes_created)
        self._tick()  # creation_time
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
        time, walk = self._tick(), node
        while walk is not None:
            walk.time = time
            time -= _ANCESTOR_STEP
            walk = walk.parent
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
        while heap and pool.num_free * page < free_tokens:
            _, node = heapq.heappop(heap)
            if not self._is_leaf(node):
                continue
            parent = node.parent
            assert parent is not None
            del parent.children[node.keys[0]]
            self.evictable_pages -= len(node.keys)
            for block in node.blocks:
                pool.drop(block)
            if self._is_leaf(parent):
                heapq.heappush(heap, (parent.time, parent))

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

    def recency(self) -> tuple[int, ...]:
        """The tree's nodes, least recent first, by serial: what its times decide (which
        node LRU evicts first), not the clock they are read on. A node's serial stands for its
        keys and blocks (a split makes a new node); its locks are the loop's to fingerprint.
        Touching the path touched last changes nothing here."""
        nodes, stack = [], [self.root]
        while stack:
            node = stack.pop()
            nodes.append(node)
            stack.extend(node.children.values())
        nodes.sort(key=lambda n: n.time)
        return tuple(n.serial for n in nodes)

    def state(self) -> tuple[object, ...]:
        """The tree as a value: every node's keys, lock count and time, depth first."""
        out: list[object] = []
        stack = [self.root]
        while stack:
            node = stack.pop()
            out.append((tuple(node.keys), node.lock_ref, node.time))
            stack.extend(node.children[k] for k in sorted(node.children, key=repr))
        return tuple(out)
