"""The encoder invariants on hand-made records: ``encoder-cap`` (the embeddings a step encodes
within the encoder budget, the encoder cache within its size) and ``encoder-ready`` (a grant
reads an encoder input's embeddings only when the step encodes it or the cache holds it)."""
from __future__ import annotations

from dataclasses import replace

from factories import LIMITS, good_record
from tokenbudget.spec import EncoderInput, check_step
from tokenbudget.spec import invariants as inv

MM_LIMITS = replace(LIMITS, encoder_compute_budget=10, encoder_cache_size=20)


def image(rid: str = "0", index: int = 0, key: str = "img", embeds: int = 6, in_grant: int = 6,
          scheduled: bool = True) -> EncoderInput:
    return EncoderInput(rid, index, key, embeds, in_grant, scheduled)


def mm_record(*inputs: EncoderInput, held: frozenset[str] = frozenset(), cache_used: int = 0):
    return good_record(limits=MM_LIMITS, encoder_inputs=inputs, encoder_held=held, encoder_cache_used=cache_used)


def test_a_record_without_encoder_inputs_holds_both() -> None:
    rec = good_record()
    assert rec.encoder_inputs == () and inv.encoder_cap(rec) == [] and inv.encoder_ready(rec) == []


def test_a_step_may_encode_up_to_the_budget() -> None:
    rec = mm_record(image(embeds=4), image("1", key="other", embeds=6), cache_used=10)
    assert check_step(rec) == []


def test_one_embedding_past_the_budget_is_reported_with_each_input() -> None:
    [violation] = inv.encoder_cap(mm_record(image(embeds=5), image("1", key="other", embeds=6)))
    assert violation.invariant == "encoder-cap"
    assert "computes 11 embeddings (0[0] 5, 1[0] 6), encoder budget 10" in violation.message


def test_inputs_read_from_the_cache_cost_no_budget() -> None:
    rec = mm_record(image(embeds=8), image("1", key="cached", embeds=8, scheduled=False), held=frozenset({"cached"}))
    assert inv.encoder_cap(rec) == [] and inv.encoder_ready(rec) == []


def test_the_cache_may_not_hold_more_than_its_size() -> None:
    [violation] = inv.encoder_cap(mm_record(cache_used=21))
    assert "holds 21 embeddings, size 20" in violation.message
    assert inv.encoder_cap(mm_record(cache_used=20)) == []


def test_a_grant_over_an_input_neither_encoded_nor_cached_is_not_ready() -> None:
    [violation] = inv.encoder_ready(mm_record(image(key="img", in_grant=3, scheduled=False)))
    assert violation.invariant == "encoder-ready" and violation.step == 0
    assert "0 is granted 3 embeddings of encoder input 0 (img)" in violation.message


def test_an_input_cached_before_the_step_is_ready() -> None:
    assert inv.encoder_ready(mm_record(image(scheduled=False), held=frozenset({"img"}))) == []


def test_an_input_encoded_in_the_step_for_another_request_is_ready() -> None:
    rec = mm_record(image("0", key="img"), image("1", key="img", scheduled=False))
    assert inv.encoder_ready(rec) == []


def test_an_input_the_grant_reads_no_embedding_of_needs_nothing() -> None:
    assert inv.encoder_ready(mm_record(image(in_grant=0, scheduled=False))) == []
