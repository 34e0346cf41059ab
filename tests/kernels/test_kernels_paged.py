"""Paged attention equals a dense recomputation; bad block tables and row counts are caught."""
from __future__ import annotations

import pytest
import torch

from tokenbudget.kernels.attention import Segment, dense_attend, paged_attend
from tokenbudget.kernels.buffers import InputBuffers
from tokenbudget.kernels.errors import InputRowsOverflow, KVOverflow
from tokenbudget.kernels.models import ModelSpec, TinyLM
from tokenbudget.kernels.paged_kv import PagedKVCache, slot_mapping

SPEC = ModelSpec()
BLOCK = 4


@pytest.fixture(scope="module")
def model() -> TinyLM:
    return TinyLM(SPEC)


def fresh_cache() -> PagedKVCache:
    cache = PagedKVCache(SPEC.num_layers, 32, BLOCK, SPEC.num_heads, SPEC.head_dim, "cpu")
    cache.reserve(32)
    return cache


def dense_logits(model: TinyLM, tokens: list[int]) -> torch.Tensor:
    positions = torch.arange(len(tokens))
    with torch.inference_mode():
        return model.logits(model.hidden(torch.tensor(tokens), positions, dense_attend(positions), SPEC.num_layers))


def paged_logits(model: TinyLM, cache: PagedKVCache,
                 batch: list[tuple[list[int], int, list[int]]]) -> list[torch.Tensor]:
    """One forward over several requests: (all tokens so far, first position to compute,
    block table) each; the logits of each request's computed rows."""
    ids: list[int] = []
    positions: list[int] = []
    slots: list[int] = []
    segments: list[Segment] = []
    for tokens, first, table in batch:
        context = slot_mapping(0, "r", table, torch.arange(len(tokens)), BLOCK)
        segments.append(Segment(len(ids), len(ids) + len(tokens) - first, context))
        ids += tokens[first:]
        positions += range(first, len(tokens))
        slots += context[first:].tolist()
    pos = torch.tensor(positions)
    with torch.inference_mode():
        hidden = model.hidden(torch.tensor(ids), pos, paged_attend(cache, torch.tensor(slots), pos, segments),
                              SPEC.num_layers)
        logits = model.logits(hidden)
    return [logits[s.start:s.end] for s in segments]


PREFIX = [5, 9, 17, 33, 65, 129, 7, 11]  # two full blocks, shared
A = PREFIX + [40, 41, 42]
B = PREFIX + [90, 91, 92, 93, 94]
TABLE_A = [3, 7, 1]
TABLE_B = [3, 7, 9, 12]  # blocks 3 and 7 are the prefix, as a prefix-cache hit gives them


def test_chunked_paged_prefill_equals_dense(model: TinyLM) -> None:
    cache = fresh_cache()
    first, = paged_logits(model, cache, [(A[:6], 0, TABLE_A)])
    second, = paged_logits(model, cache, [(A, 6, TABLE_A)])
    assert torch.allclose(torch.cat([first, second]), dense_logits(model, A), atol=1e-4)


def test_a_shared_prefix_block_is_read_by_both_requests(model: TinyLM) -> None:
    cache = fresh_cache()
    paged_logits(model, cache, [(A[:6], 0, TABLE_A)])
    # A finishes its prompt while B, hitting A's two prefix blocks, computes only its own tokens.
    rest_a, own_b = paged_logits(model, cache, [(A, 6, TABLE_A), (B, len(PREFIX), TABLE_B)])
    assert torch.allclose(rest_a, dense_logits(model, A)[6:], atol=1e-4)
    assert torch.allclose(own_b, dense_logits(model, B)[len(PREFIX):], atol=1e-4)


def test_a_block_written_by_two_requests_gives_wrong_numbers(model: TinyLM) -> None:
    cache = fresh_cache()
    paged_logits(model, cache, [(A, 0, TABLE_A)])
    corrupted_b = [3, 7, 1, 12]  # block 1 is A's private third block
    paged_logits(model, cache, [(B, len(PREFIX), corrupted_b)])
    decode = A + [43]
    last, = paged_logits(model, cache, [(decode, len(A), TABLE_A)])  # A reads its block 1 back
    assert not torch.allclose(last, dense_logits(model, decode)[-1:], atol=1e-3)

    cache = fresh_cache()  # the same steps with B's own block: the numbers are right
    paged_logits(model, cache, [(A, 0, TABLE_A)])
    paged_logits(model, cache, [(B, len(PREFIX), TABLE_B)])
    last, = paged_logits(model, cache, [(decode, len(A), TABLE_A)])
    assert torch.allclose(last, dense_logits(model, decode)[-1:], atol=1e-4)


def test_a_write_past_the_blocks_held_is_a_kv_overflow() -> None:
    with pytest.raises(KVOverflow) as err:
        slot_mapping(7, "a", [3, 7], torch.arange(6, 10), BLOCK)
    assert err.value.position == 8
    assert str(err.value) == "step 7: request 'a' writes KV at position 8, but its 2 blocks hold positions 0..7"
    assert slot_mapping(7, "a", [3, 7], torch.arange(3, 8), BLOCK).tolist() == [15, 28, 29, 30, 31]


def test_more_rows_than_b_fail_before_the_buffers_are_written() -> None:
    buffers = InputBuffers(520, "cpu")
    buffers.token_ids.fill_(3)
    with pytest.raises(InputRowsOverflow) as err:
        buffers.claim(2, 528)
    assert (err.value.step, err.value.rows, err.value.capacity) == (2, 528, 520)
    assert "step 2" in str(err.value) and "528 input rows" in str(err.value) and "B = 520" in str(err.value)
    assert bool((buffers.token_ids == 3).all())
    assert buffers.claim(2, 520).token_ids.data_ptr() == buffers.token_ids.data_ptr()  # views, not copies


def test_growable_buffers_allocate_past_b() -> None:
    assert InputBuffers(8, "cpu", growable=True).claim(0, 12).token_ids.shape == (12,)


def test_the_cache_grows_and_keeps_its_contents() -> None:
    cache = PagedKVCache(1, 1000, BLOCK, 2, 4, "cpu")
    cache.reserve(2)
    k = torch.randn(3, 2, 4)
    cache.write(0, torch.tensor([0, 5, 7]), k, k)
    cache.reserve(300)
    assert cache.num_reserved_blocks >= 300
    assert torch.equal(cache.read(0, torch.tensor([0, 5, 7]))[0], k)


def test_models_are_deterministic_from_the_seed() -> None:
    same = TinyLM(ModelSpec(seed=3)), TinyLM(ModelSpec(seed=3))
    assert torch.equal(same[0].head, same[1].head) and torch.equal(same[0].layers[2].wqkv, same[1].layers[2].wqkv)
    assert not torch.equal(same[0].head, TinyLM(ModelSpec(seed=4)).head)
