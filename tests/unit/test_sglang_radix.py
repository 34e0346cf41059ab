"""The model's SGLang radix cache (``model.sglang.radix``): prefix sharing between the requests
of a prefix group, bigram keys under EAGLE, locks that keep a running request's pages from
eviction, least-recently-used eviction of unlocked leaves, and the switch
(``enable_prefix_caching``: SGLang's ``disable_radix_cache`` negated)."""
from __future__ import annotations

from tokenbudget.model import BudgetConfig, get_policy
from tokenbudget.model.kv_pool import KVBlockPool
from tokenbudget.model.request import Request
from tokenbudget.model.sglang.loop import SglangLoop
from tokenbudget.model.sglang.radix import RadixCache


def _loop(**overrides: object) -> SglangLoop:
    cfg = BudgetConfig(**{"max_num_batched_tokens": 64, "max_num_seqs": 4, "num_speculative_tokens": 1,
                          "method": "eagle3", "block_size": 4, "num_kv_blocks": 40, "max_model_len": 48,
                          "enable_prefix_caching": True, **overrides})
    loop = get_policy("sglang-0.5.23").loop(cfg, get_policy("sglang-0.5.23"))
    assert isinstance(loop, SglangLoop)
    return loop


def _step(loop: SglangLoop) -> dict[str, int]:
    record = loop.schedule()
    loop.update_from_output(record, {})
    return dict(record.num_scheduled_tokens), dict(record.computed_before)


def test_a_group_member_admitted_after_another_prefilled_skips_the_shared_pages() -> None:
    loop = _loop()
    loop.add_request("a", 20, 8, prefix_group="g", prefix_len=17)
    assert _step(loop)[0] == {"a": 20}
    loop.add_request("b", 20, 8, prefix_group="g", prefix_len=17)
    grants, before = _step(loop)
    # 17 shared tokens: a bigram page is keyed by its 4 tokens and the next, so 4 pages (16 tokens) are shared
    assert grants == {"b": 4} and before == {"b": 16}
    assert loop.requests["b"].block_ids[:4] == loop.requests["a"].block_ids[:4]
    loop.add_request("c", 20, 8, prefix_group="g", prefix_len=16)  # its 16th token is its own: 3 pages
    assert _step(loop)[1] == {"c": 12}


def test_eagle_keys_a_page_by_its_tokens_and_the_next() -> None:
    plain = RadixCache(KVBlockPool(16, 4, False), lookahead=0)
    eagle = RadixCache(KVBlockPool(16, 4, False), lookahead=1)
    assert plain.pages_keyed(8) == 2 and eagle.pages_keyed(8) == 1 and eagle.pages_keyed(9) == 2
    a = Request("a", 9, 4, 0, prefix_group="g", prefix_len=8)
    assert eagle.keys(a, 2)[0] == ("group", "g", 0) and eagle.keys(a, 2)[1] == ("request", "a", 1)


def test_the_radix_cache_off_shares_nothing() -> None:
    loop = _loop(enable_prefix_caching=False)
    loop.add_request("a", 20, 8, prefix_group="g", prefix_len=17)
    _step(loop)
    loop.add_request("b", 20, 8, prefix_group="g", prefix_len=17)
    assert _step(loop)[0] == {"b": 20} and loop.tree is None


def test_a_running_request_locks_its_pages_and_a_finished_one_leaves_them_evictable() -> None:
    loop = _loop()
    loop.add_request("a", 13, 2)
    _step(loop)  # the prefill: 12 tokens keyed (3 pages) go into the tree, locked by a
    assert loop.tree is not None and loop.tree.evictable_pages == 0
    free = loop.pool.num_free
    _step(loop)  # the decode writes the last token: a finishes, its pages stay cached
    assert loop.requests["a"].is_finished and loop.tree.evictable_pages == 3
    assert loop.pool.num_free < loop.cfg.num_kv_blocks and loop.available() == loop.cfg.num_kv_blocks * 4
    assert free < loop.pool.num_free


def _cached(tree: RadixCache, pool: KVBlockPool, rid: str, group: str, tokens: int) -> tuple[Request, list[int]]:
    """A request of ``tokens`` group tokens that ran, was inserted whole and left: its pages."""
    req = Request(rid, tokens, 4, 0, prefix_group=group, prefix_len=tokens)
    tree.adopt(req, tree.root, [])
    pool.allocate(req, tokens, [])
    tree.checkpoint(req, tokens)
    blocks = list(req.block_ids)
    tree.release(req)
    pool.free(req)
    return req, blocks


def test_eviction_takes_the_least_recently_used_unlocked_leaf_first() -> None:
    pool = KVBlockPool(8, 4, False)
    tree = RadixCache(pool, lookahead=0)
    (old, _), (new, _) = _cached(tree, pool, "old", "x", 8), _cached(tree, pool, "new", "y", 8)
    assert tree.evictable_pages == 4 and pool.num_free == 4
    tree.match(tree.keys(old, 2))  # a touch: "old" is now the most recent
    tree.evict(5 * 4)  # one page short: the least recent leaf ("new", 2 pages) goes
    assert pool.num_free == 6 and tree.match(tree.keys(new, 2))[1] == [] and len(tree.match(tree.keys(old, 2))[1]) == 2
    node, hit = tree.match(tree.keys(old, 2))
    tree.lock(node)
    tree.evict(8 * 4)  # the locked path stays whatever is asked
    assert pool.num_free == 6 and tree.match(tree.keys(old, 2))[1] == hit


def test_a_match_part_way_into_a_node_splits_it() -> None:
    pool = KVBlockPool(8, 4, False)
    tree = RadixCache(pool, lookahead=0)
    long, blocks = _cached(tree, pool, "long", "g", 12)
    short = Request("short", 8, 4, 0, prefix_group="g", prefix_len=8)
    node, hit = tree.match(tree.keys(short, 2))
    assert hit == blocks[:2] == tree.match(tree.keys(long, 2))[1] and len(node.keys) == 2
    assert list(node.children.values())[0].keys == tree.keys(long, 3)[2:]


def _order(tree: RadixCache) -> tuple[object, ...]:
    """The nodes but the root, least recent first, each by its first key and its blocks."""
    nodes, stack = [], list(tree.root.children.values())
    while stack:
        node = stack.pop()
        nodes.append(node)
        stack.extend(node.children.values())
    return tuple((repr(n.keys[0]), tuple(n.blocks)) for n in sorted(nodes, key=lambda n: n.time))


def test_recency_counts_exactly_the_changes_of_the_order_not_the_clock() -> None:
    """Matches, a refresh's batch of them, inserts and evictions at random: ``recency`` moves
    between two reads exactly when the order of the nodes' times did; re-matching the path
    matched last, or the same batch again, leaves it where it was."""
    import random

    rng = random.Random(7)
    pool = KVBlockPool(64, 4, False)
    tree = RadixCache(pool, lookahead=0)
    cached = [_cached(tree, pool, f"r{i}", f"g{i % 3}", rng.choice([4, 8, 12])) for i in range(6)]
    before, count = _order(tree), tree.recency()
    moved = stayed = 0
    for _ in range(400):
        roll = rng.random()
        if roll < 0.6:  # one match, or a batch of them (a waiting-prefix refresh)
            batch = [rng.choice(cached)[0] for _ in range(rng.choice([1, 1, 3]))]
            for _ in range(rng.choice([1, 2])):  # sometimes the same again
                for req in batch:
                    tree.match(tree.keys(req, rng.randint(1, req.num_prompt_tokens // 4)))
        elif roll < 0.8:
            cached.append(_cached(tree, pool, f"n{len(cached)}", f"g{rng.randrange(4)}", rng.choice([4, 8, 12])))
        else:
            tree.evict((pool.num_free + rng.randint(1, 4)) * 4)
        after, now = _order(tree), tree.recency()
        assert (now != count) == (after != before), (after, before)
        moved, stayed = moved + (now != count), stayed + (now == count)
        before, count = after, now
    assert moved > 50 and stayed > 50, (moved, stayed)
