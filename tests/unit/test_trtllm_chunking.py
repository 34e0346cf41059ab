"""TensorRT-LLM's chunking policies and draft fitting (``tokenbudget/model/trtllm/chunking.py``) against
the capacity they are given; the draft fitting before PR #13578 asks to discard more
drafts than a request holds."""
from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tokenbudget.model.trtllm.chunking import (
    CHUNKING_POLICIES, EQUAL_PROGRESS, FIRST_COME_FIRST_SERVED, FORCE_CHUNK, Context, chunk_sizes, kept_drafts, reuse_adjusted_compute,
)

contexts = st.lists(st.builds(Context, st.integers(1, 40), st.integers(0, 40), st.integers(0, 4)), min_size=1,
                    max_size=4)


def compute(ctxs: list[Context], sizes: list[int]) -> int:
    return sum(reuse_adjusted_compute(s, min(c.reusable, c.remaining), c.remaining) for c, s in zip(ctxs, sizes))


def test_reuse_discounts_only_the_last_chunk() -> None:
    assert reuse_adjusted_compute(8, 4, 20) == 8  # shifted: still 8 tokens
    assert reuse_adjusted_compute(20, 4, 20) == 16
    assert reuse_adjusted_compute(8, 0, 20) == 8


@pytest.mark.parametrize("policy", CHUNKING_POLICIES)
@given(ctxs=contexts, capacity=st.integers(0, 64), unit=st.integers(1, 8))
def test_chunks_stay_within_the_capacity(policy: str, ctxs: list[Context], capacity: int, unit: int) -> None:
    sizes = chunk_sizes(policy, ctxs, capacity, unit, None)
    assert all(0 <= s <= c.remaining for c, s in zip(ctxs, sizes))
    assert compute(ctxs, sizes) <= capacity


@given(ctxs=contexts, capacity=st.integers(0, 64), unit=st.integers(1, 8), max_len=st.integers(8, 32))
def test_fcfs_and_equal_progress_respect_max_context_length(ctxs: list[Context], capacity: int, unit: int,
                                                            max_len: int) -> None:
    for policy in (EQUAL_PROGRESS, FIRST_COME_FIRST_SERVED):
        sizes = chunk_sizes(policy, ctxs, capacity, unit, max_len)
        assert all(reuse_adjusted_compute(s, min(c.reusable, c.remaining), c.remaining) <= max_len
                   for c, s in zip(ctxs, sizes)), policy


def test_equal_progress_advances_in_lockstep_and_fcfs_serves_the_first() -> None:
    ctxs = [Context(100), Context(100)]
    assert chunk_sizes(EQUAL_PROGRESS, ctxs, 48, 8, None) == [24, 24]
    assert chunk_sizes(FIRST_COME_FIRST_SERVED, ctxs, 48, 8, None) == [48, 0]
    assert chunk_sizes(FORCE_CHUNK, ctxs, 44, 8, None) == [40, 0]
    with pytest.raises(ValueError):
        chunk_sizes(FORCE_CHUNK, ctxs, 44, 8, 4)


@given(ctxs=contexts, capacity=st.integers(0, 64), unit=st.integers(1, 8))
def test_kept_drafts_never_push_the_batch_past_the_capacity(ctxs: list[Context], capacity: int, unit: int) -> None:
    sizes = chunk_sizes(FIRST_COME_FIRST_SERVED, ctxs, capacity, unit, None)
    kept = kept_drafts(ctxs, sizes, capacity, unit, None)
    assert all(0 <= k <= c.drafts for c, k in zip(ctxs, kept))
    assert compute(ctxs, sizes) + sum(kept) <= capacity


def test_before_13578_an_overshot_batch_discards_more_drafts_than_held() -> None:
    """Chunks of 12 compute tokens against a capacity of 10: the slack left is -2."""
    ctxs, sizes = [Context(6, drafts=3), Context(6, drafts=3)], [6, 6]
    assert kept_drafts(ctxs, sizes, 10, 8, None) == [0, 0]
    before = kept_drafts(ctxs, sizes, 10, 8, None, clamped=False)
    assert before[0] == -2  # draft_discard = 3 - (-2) = 5 > the 3 drafts the request holds
