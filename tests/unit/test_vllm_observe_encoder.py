"""observe's reading of vLLM's encoder on stand-ins for its objects (no vLLM here): the encoder
inputs a step encodes or its grants reach, with the embeddings each grant reads; the encoder
cache's occupancy; where ``encoder-ready`` is not judged."""
from __future__ import annotations

from types import SimpleNamespace
from typing import Optional

from tokenbudget.harness.vllm import observe
from tokenbudget.spec import EncoderInput


class PlaceholderRange:  # vLLM's, with its embedding mask (vllm/multimodal/inputs.py:154-178 (vLLM 0.32.0))
    def __init__(self, offset: int, length: int, is_embed: Optional[list[bool]] = None) -> None:
        self.offset, self.length, self.is_embed = offset, length, is_embed

    def _cumsum(self) -> list[int]:
        total, out = 0, []
        for flag in self.is_embed or ():
            total += flag
            out.append(total)
        return out

    def get_num_embeds(self) -> int:
        return self.length if self.is_embed is None else (self._cumsum() or [0])[-1]

    def get_embeds_indices_in_range(self, start: int, end: int) -> tuple[int, int]:
        if self.is_embed is None:
            return start, end
        sums = self._cumsum()
        return (sums[start - 1] if start > 0 else 0), (sums[end - 1] if end > 0 else 0)


def image(offset: int, length: int, key: str, is_embed: Optional[list[bool]] = None) -> SimpleNamespace:
    return SimpleNamespace(identifier=key, mm_position=PlaceholderRange(offset, length, is_embed))


def scheduler(**features: list[SimpleNamespace]) -> SimpleNamespace:
    requests = {rid: SimpleNamespace(mm_features=f) for rid, f in features.items()}
    return SimpleNamespace(requests=requests, encoder_cache_manager=SimpleNamespace(cache_size=30, num_free_slots=30))


def test_inputs_the_grant_reaches_or_the_step_encodes_are_read_and_others_left() -> None:
    sched = scheduler(a=[image(4, 12, "A"), image(30, 8, "late")], b=[], c=[image(0, 6, "C", [False, True] * 3)])
    out = SimpleNamespace(scheduled_encoder_inputs={"a": [0]})
    found = observe.encoder_inputs(sched, out, {"a": 10, "b": 5, "c": 4}, {"a": 0, "b": 0, "c": 1})
    assert found == (EncoderInput("a", 0, "A", 12, 6, True),  # positions 4-9 of [0, 10)
                     EncoderInput("c", 0, "C", 3, 2, False))  # positions 1-4: embeddings at 1 and 3


def test_an_input_encoded_ahead_of_the_grant_is_read_with_nothing_in_it() -> None:
    sched = scheduler(a=[image(10, 4, "A")])
    found = observe.encoder_inputs(sched, SimpleNamespace(scheduled_encoder_inputs={"a": [0]}), {"a": 10}, {"a": 0})
    assert found == (EncoderInput("a", 0, "A", 4, 0, True),)


def test_the_cache_holds_its_entries_or_what_its_free_slots_leave() -> None:
    sched = scheduler()
    sched.encoder_cache_manager.num_embeds_by_hash = {"A": 12, "B": 7}
    sched.encoder_cache_manager.cached = {"A": {"a"}, "B": set()}  # B unreferenced: held until evicted
    assert observe.encoder_cache_used(sched) == 19 and observe.encoder_cache_keys(sched) == {"A", "B"}
    encoder_decoder = scheduler()
    encoder_decoder.encoder_cache_manager.num_free_slots = 22
    assert observe.encoder_cache_used(encoder_decoder) == 8 and observe.encoder_cache_keys(encoder_decoder) == set()


class FullAttentionSpec:
    block_size = 16


class FullAttentionManager:  # named as vLLM's: observe reads a group's kind off its manager
    block_size = 16
    block_pool = SimpleNamespace(null_block=SimpleNamespace(block_id=0))


def test_an_encoder_cache_connector_leaves_encoder_ready_unjudged() -> None:
    managers = SimpleNamespace(coordinator=SimpleNamespace(single_type_managers=(FullAttentionManager(),)))
    sched = SimpleNamespace(kv_cache_config=SimpleNamespace(kv_cache_groups=[SimpleNamespace(
        kv_cache_spec=FullAttentionSpec())]), vllm_config=SimpleNamespace(model_config=SimpleNamespace()),
        is_encoder_decoder=False, ec_connector=None, kv_cache_manager=managers)
    assert observe.scope(sched).excluded == {}
    sched.ec_connector = object()
    assert set(observe.scope(sched).excluded) == {"encoder-ready"}
    assert "connector" in observe.scope(sched).excluded["encoder-ready"]
