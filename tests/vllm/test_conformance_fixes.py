"""Model behaviours fixed by conformance with vLLM 0.32, one test each (the corpus holds a
trace for each, replayed on vLLM by tests/vllm/test_vllm_target.py; this file needs no vLLM).
A config without ``engine_version`` follows the newest modelled vLLM, so a test of a
0.32 behaviour that changed in 0.33 names its version."""
from __future__ import annotations

from tokenbudget.model import BudgetConfig, get_policy, scheduler_for
from tokenbudget.model.findings import FINDINGS
from tokenbudget.model.kv_pool import KVBlockPool
from tokenbudget.model.request import Request
from tokenbudget.model.replay import replay_on_model
from tokenbudget.spec.trace import load_trace

F1_TRACE = FINDINGS["F1"].trace_path


def request(rid: str, prompt: int, group: str | None = None, prefix: int = 0) -> Request:
    return Request(rid, prompt, 4, arrival=0, prefix_group=group, prefix_len=prefix)


def hit_blocks(method: str, version: str) -> int:
    """Blocks of a 12-token prompt that a second request with the same prompt hits (block size 4)."""
    s = scheduler_for(BudgetConfig(max_num_batched_tokens=64, max_num_seqs=4, num_speculative_tokens=2, method=method,
                                   block_size=4, max_model_len=64, engine_version=version), get_policy("vllm-adaptive"))
    s.add_request("a", 12, 4, prefix_group="sys", prefix_len=12)
    s.update_from_output(s.schedule())
    s.add_request("b", 12, 4, prefix_group="sys", prefix_len=12)
    return len(s.pool.find_cached_prefix(s.requests["b"]))


def test_eagle_family_hits_give_back_their_last_block() -> None:
    assert hit_blocks("ngram", "0.32") == 2 and hit_blocks("draft_model", "0.32") == 2  # 2 of 3: never the last token
    assert all(hit_blocks(m, "0.32") == 1 for m in ("eagle3", "mtp", "dflash", "dspark"))


def test_no_method_gives_back_a_hit_block_in_vllm_0_33() -> None:
    assert all(hit_blocks(m, "0.33") == 2 for m in ("ngram", "draft_model", "eagle3", "mtp", "dflash", "dspark"))


def test_a_waiting_request_is_admitted_only_if_its_whole_sequence_fits() -> None:
    s = scheduler_for(BudgetConfig(max_num_batched_tokens=16, max_num_seqs=4, block_size=4, num_kv_blocks=8,
                               max_model_len=32), get_policy("vllm-adaptive"))
    s.add_request("a", 20, 2)
    s.update_from_output(s.schedule())
    s.add_request("b", 20, 2)  # its first 12-token chunk fits the 3 free blocks, its 20 tokens do not
    assert s.schedule().num_scheduled_tokens == {"a": 4}


def test_freed_blocks_without_content_are_reused_first_and_cached_ones_last() -> None:
    pool = KVBlockPool(num_blocks=6, block_size=4, enable_prefix_caching=True)
    cached, plain = request("a", 8, "sys", 8), request("c", 3)
    assert pool.allocate(cached, 8, []) and pool.allocate(plain, 3, [])
    pool.cache_full_blocks(cached, 8)
    pool.free(cached)
    pool.free(plain)
    taker = request("d", 16)
    assert pool.allocate(taker, 16, [])
    assert taker.block_ids == [2, 3, 4, 5]  # c's block, then the never-used ones: a's blocks stay cached
    assert pool.find_cached_prefix(request("b", 9, "sys", 8)) == [0, 1]


def test_identical_content_is_cached_twice_and_the_older_copy_is_hit_first() -> None:
    pool = KVBlockPool(num_blocks=4, block_size=4, enable_prefix_caching=True)
    first, second = request("a", 5, "sys", 4), request("b", 5, "sys", 4)
    for r in (first, second):
        assert pool.allocate(r, 5, [])
        pool.cache_full_blocks(r, 4)
    assert pool.blocks_of_key[("group", "sys", 0)] == {0: None, 2: None}
    pool.free(first)
    assert pool.allocate(request("d", 8), 8, [])  # takes a's two blocks, evicting its copy
    assert pool.find_cached_prefix(request("c", 5, "sys", 4)) == [2]  # b's copy still hits


def test_a_padded_admission_cut_short_rolls_back_only_its_rows() -> None:
    result = replay_on_model(load_trace(F1_TRACE))  # finding F1: the model survives it and keeps going
    assert result.ok and not result.errors and {v.invariant for v in result.violations} == {"spec-shape"}
