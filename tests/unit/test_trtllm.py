"""TensorRT-LLM's model: validation, the method table's one-model column, and the loop
(generation requests ahead of context chunks, drafts outside the grant, KV for 1 + D)."""
from __future__ import annotations

import pytest

from tokenbudget.model import BudgetConfig, ConfigError, SchedulerLoop, get_policy, methods, scheduler_for
from tokenbudget.spec import check_step

MTP = dict(num_speculative_tokens=3, method="mtp")


def scheduler(policy: str = "trtllm", **knobs) -> SchedulerLoop:
    base = dict(max_num_batched_tokens=64, max_num_seqs=8, max_model_len=256, block_size=4, num_kv_blocks=256)
    return scheduler_for(BudgetConfig(**{**base, **knobs}), get_policy(policy))


def refusal(policy: str, **knobs) -> str:
    with pytest.raises(ConfigError) as err:
        get_policy(policy).validate(BudgetConfig(**knobs))
    return str(err.value)


def test_the_model_asks_every_generation_request_to_fit_one_step() -> None:
    knobs = dict(max_num_seqs=16, max_model_len=64, **MTP)
    assert "max_num_seqs * (1 + num_speculative_tokens) (16 * 4)" in refusal("trtllm", max_num_batched_tokens=63,
                                                                             **knobs)
    get_policy("trtllm").validate(BudgetConfig(max_num_batched_tokens=64, **knobs))


@pytest.mark.parametrize("knobs, words", [
    (dict(scheduling_policy="priority"), "scheduling_policy=fcfs"),
    (dict(parallel_drafting=True, **MTP), "parallel_drafting=false"),
    (dict(max_num_scheduled_tokens=32), "leave max_num_scheduled_tokens unset"),
    (dict(enable_chunked_prefill=False, max_model_len=66), "max_model_len - 1 (65)"),
    (dict(block_size=128), "max_num_batched_tokens (64) must be >= block_size (128)"),
    (dict(max_model_len=64, block_size=1, num_kv_blocks=69, **MTP), "max_model_len + k + L (70;"),
])
def test_refusals_name_the_knob(knobs: dict, words: str) -> None:
    assert words in refusal("trtllm", max_num_batched_tokens=64, max_num_seqs=4, **knobs)


def test_one_model_methods_are_mtp_and_eagle3() -> None:
    assert {m for m in methods.TRTLLM if methods.one_model("trtllm", m)} == {"mtp", "eagle3"}
    assert all(methods.decode_rows("trtllm", m, 3) == 4 for m in methods.TRTLLM)
    assert {m: methods.lookahead("trtllm", m, 3) for m in methods.TRTLLM} == {
        "mtp": 3, "eagle3": 3, "draft_model": 3, "ngram": 0}  # model drafters write KV past the grant
    assert not methods.one_model("vllm-0.32", "mtp")  # vLLM's table has no one-model column set


def test_decodes_stay_ahead_of_context_chunks_on_a_tight_pool() -> None:
    """The micro-batch scheduler charges generation requests first: the RUNNING queue the
    pass walks keeps them ahead of context chunks after every step, preemptions included."""
    import random
    rng = random.Random(1)
    s = scheduler(max_num_batched_tokens=32, num_kv_blocks=20, max_model_len=64, **MTP)
    seen_preemption = False
    for i in range(40):
        if rng.random() < 0.5:
            s.add_request(f"r{i}", rng.randint(1, 60), rng.randint(1, 40))
        record = s.schedule()
        seen_preemption |= bool(record.preempted)
        s.update_from_output(record, {rid: rng.randint(0, 3) for rid in record.num_scheduled_tokens})
        kinds = [r.is_decoding for r in s.running]
        assert kinds == sorted(kinds, reverse=True), [(r.request_id, r.is_decoding) for r in s.running]
    assert seen_preemption


def test_a_decode_is_granted_one_charged_one_plus_k_and_holds_kv_for_one_plus_k() -> None:
    s = scheduler(**MTP)
    s.add_request("a", 8, 16)
    s.update_from_output(s.schedule())
    s.add_request("long", 200, 4)
    record = s.schedule()
    assert record.num_scheduled_tokens == {"a": 1, "long": 60}
    assert record.runner_rows == {"a": 4, "long": 60} and record.scheduled_draft_tokens == {"a": 3, "long": 0}
    assert record.initial_token_budget == 64 and record.ledger[0].token_before - record.ledger[0].token_after == 4
    assert len(record.block_tables["a"]) * 4 >= record.computed_before["a"] + 1 + 3 + 3  # 1 + D, then L
    assert check_step(record) == []


@pytest.mark.parametrize("method, overflows", [("mtp", True), ("eagle3", True), ("draft_model", False),
                                               ("ngram", False)])
def test_before_16101_only_one_model_methods_overflow(method: str, overflows: bool) -> None:
    s = scheduler("trtllm-one-model-unreserved", num_speculative_tokens=3, method=method)
    for rid in "ab":
        s.add_request(rid, 8, 16)
    s.update_from_output(s.schedule())
    s.add_request("long", 62, 4)  # fits the 62 tokens left whole: a chunk cut short is aligned down to the block
    record = s.schedule()
    assert record.total_runner_rows == 64 + 2 * 3 if overflows else record.total_runner_rows <= 64
    assert ({v.invariant for v in check_step(record)} == {"input-rows-cap"}) is overflows
