"""The reference scheduler's features, one by one, each judged by the spec too."""
from __future__ import annotations

import random
from collections import Counter

import pytest

from tokenbudget.model import BudgetConfig, SchedulerLoop, get_policy, scheduler_for
from tokenbudget.model.fastdeploy.policies import FastDeployDecodeCount
from tokenbudget.spec import check_step

SPEC = dict(num_speculative_tokens=4, method="ngram", parallel_drafting=True)  # d = 3, L = 0


def scheduler(policy="vllm-adaptive", **knobs) -> SchedulerLoop:
    base = dict(max_num_batched_tokens=20, max_num_seqs=16, max_model_len=64, block_size=4, num_kv_blocks=64)
    return scheduler_for(BudgetConfig(**{**base, **knobs}), get_policy(policy))


def step(s: SchedulerLoop, accepted=None):
    record = s.schedule()
    assert check_step(record) == [], check_step(record)
    s.update_from_output(record, accepted or {})
    return record


def test_seed_000_grants_per_scheduled_request():
    s = scheduler(**SPEC)
    s.add_request("0", 10, 16)
    s.add_request("1", 10, 16)
    record = step(s)
    assert record.num_scheduled_tokens == {"0": 10, "1": 4}
    assert record.runner_rows == {"0": 13, "1": 7}
    assert [(e.kind, e.input_after) for e in record.ledger] == [("grant", 7), ("grant", 0)]


def test_chunked_prefill_spans_steps():
    s = scheduler(max_num_batched_tokens=16)
    s.add_request("a", 40, 2)
    grants = [step(s).num_scheduled_tokens.get("a") for _ in range(4)]
    assert grants == [16, 16, 8, 1]
    assert s.requests["a"].num_output_tokens == 2 and s.requests["a"].status.value == "finished"


def test_chunked_prefill_off_waits_for_a_whole_prompt():
    s = scheduler(max_num_batched_tokens=64, enable_chunked_prefill=False)
    s.add_request("a", 50, 4)
    s.add_request("b", 20, 4)
    assert step(s).num_scheduled_tokens == {"a": 50}  # b would need a chunk: it waits
    assert step(s).num_scheduled_tokens == {"a": 1, "b": 20}


def test_long_prefill_threshold_applies_only_with_company():
    alone = scheduler(max_num_batched_tokens=32, long_prefill_token_threshold=8)
    alone.add_request("a", 30, 2)
    assert step(alone).num_scheduled_tokens == {"a": 30}
    pair = scheduler(max_num_batched_tokens=32, long_prefill_token_threshold=8)
    pair.add_request("a", 30, 2)
    pair.add_request("b", 30, 2)
    assert step(pair).num_scheduled_tokens == {"a": 8, "b": 8}


def test_max_model_len_clips_the_decode_and_finishes_the_request():
    s = scheduler(max_model_len=16, num_speculative_tokens=4, method="ngram")
    s.add_request("a", 12, 100)
    assert step(s).num_scheduled_tokens == {"a": 12}
    record = step(s, {"a": 4})  # 1 + 4 drafts asked, only 16 - 12 - 1 = 3 fit
    assert record.num_scheduled_tokens == {"a": 3} and record.scheduled_draft_tokens == {"a": 2}
    req = s.requests["a"]
    assert req.num_tokens == 16 and req.status.value == "finished"


def test_lookahead_blocks_are_reserved():
    s = scheduler(num_speculative_tokens=4, method="eagle3")  # L = 4
    s.add_request("a", 10, 8)
    record = step(s)
    assert len(record.block_tables["a"]) == 4  # ceil((10 + 4) / 4)


def test_prefix_cache_hit_skips_computed_blocks():
    s = scheduler(max_num_batched_tokens=64)
    s.add_request("a", 20, 4, prefix_group="sys", prefix_len=16)
    step(s)
    s.add_request("b", 24, 4, prefix_group="sys", prefix_len=16)
    record = step(s)
    assert record.computed_before["b"] == 16 and record.num_scheduled_tokens["b"] == 8
    assert record.block_tables["a"][:4] == record.block_tables["b"][:4]


def test_prefix_hit_never_covers_the_last_token_and_pads_to_one_plus_k():
    s = scheduler(max_num_batched_tokens=64, num_speculative_tokens=4, method="ngram")
    s.add_request("a", 17, 8, prefix_group="sys", prefix_len=16)
    step(s)
    s.add_request("b", 17, 8, prefix_group="sys", prefix_len=16)
    record = step(s)  # b: 16 cached, 1 token left, "a" decoding in the same step -> padded
    assert record.computed_before["b"] == 16
    assert record.num_scheduled_tokens["b"] == 5 and record.scheduled_draft_tokens["b"] == 4
    assert "b" in record.padded


def test_padding_cut_by_long_prefill_threshold_breaks_spec_shape():
    # vLLM 0.32 pads a 1-token admission to 1 + k, then applies the threshold: a cut pad
    s = scheduler(max_num_batched_tokens=64, num_speculative_tokens=4, method="ngram",
                  long_prefill_token_threshold=3)
    s.add_request("a", 17, 8, prefix_group="sys", prefix_len=16)
    s.add_request("c", 2, 8)
    for _ in range(6):
        step(s)
    s.add_request("b", 17, 8, prefix_group="sys", prefix_len=16)
    record = s.schedule()
    assert "b" in record.padded and record.num_scheduled_tokens["b"] == 3
    assert {v.invariant for v in check_step(record)} == {"spec-shape"}


def test_fcfs_preemption_evicts_the_tail_and_skips_waiting():
    s = scheduler(max_num_batched_tokens=32, num_kv_blocks=16, max_model_len=64)  # 64 slots
    s.add_request("a", 28, 40)
    s.add_request("b", 28, 40)
    step(s)
    assert s.requests["b"].num_computed_tokens == 4
    step(s)
    s.add_request("c", 4, 4)
    preempting = None
    for _ in range(12):
        record = step(s)
        if record.preempted:
            preempting = record
            break
    assert preempting is not None and preempting.preempted == ("b",)
    assert "c" not in preempting.num_scheduled_tokens  # the waiting pass is skipped
    assert s.waiting[0].request_id == "b" and s.requests["b"].num_computed_tokens == 0


def test_priority_preemption_refunds_a_grant_made_in_the_same_pass():
    s = scheduler(policy="vllm-adaptive", max_num_batched_tokens=64, num_kv_blocks=16, block_size=4,
                  scheduling_policy="priority", **SPEC)
    s.add_request("low", 20, 40, priority=5)
    step(s)
    s.add_request("high", 20, 40, priority=0)
    refund = None
    for _ in range(20):
        record = s.schedule()
        assert check_step(record) == []
        s.update_from_output(record, {"low": 4, "high": 4})
        if any(e.kind == "refund" for e in record.ledger):
            refund = record
            break
    assert refund is not None
    kinds = [(e.kind, e.request_id) for e in refund.ledger]
    assert kinds == [("grant", "low"), ("refund", "low"), ("grant", "high")]
    assert refund.preempted == ("low",)
    assert set(refund.num_scheduled_tokens) == {"high"}
    grant, back = refund.ledger[0], refund.ledger[1]
    assert back.token_after - back.token_before == grant.tokens
    assert back.input_after - back.input_before == grant.tokens + 3
    assert s.requests["low"].num_computed_tokens == 0 and s.waiting[0].request_id == "low"


def test_update_from_output_applies_accepted_drafts():
    s = scheduler(**SPEC)
    s.add_request("a", 10, 50)
    step(s)
    req = s.requests["a"]
    assert (req.num_output_tokens, req.num_draft_tokens) == (1, 4)
    record = step(s, {"a": 2})
    assert record.num_scheduled_tokens == {"a": 5} and record.scheduled_draft_tokens == {"a": 4}
    assert req.num_output_tokens == 4 and req.num_computed_tokens == req.num_tokens - 1


def test_accepted_drafts_are_clipped_and_outputs_stop_at_max_tokens():
    s = scheduler(**SPEC)
    s.add_request("a", 10, 3)
    step(s)
    step(s, {"a": 99})
    req = s.requests["a"]
    assert req.num_output_tokens == 3 and req.status.value == "finished" and req.block_ids == []


def test_abort_frees_blocks_and_leaves_no_queue():
    s = scheduler()
    s.add_request("a", 10, 5)
    s.add_request("b", 10, 5)
    step(s)
    free_before = s.pool.num_free
    s.abort_request("a")
    assert s.requests["a"].status.value == "aborted"
    assert all(r.request_id != "a" for r in s.running + s.waiting)
    assert s.pool.num_free > free_before
    s.abort_request("a")  # aborting twice is harmless


def test_add_request_rejects_bad_lengths_and_duplicates():
    s = scheduler()
    s.add_request("a", 10, 5)
    for args in [("a", 10, 5), ("b", 64, 5), ("c", 0, 5), ("d", 10, 0)]:
        with pytest.raises(ValueError):
            s.add_request(*args)
    with pytest.raises(ValueError, match="prefix_len"):
        s.add_request("e", 10, 5, prefix_len=11)


def test_seq_cap_limits_admissions():
    s = scheduler(max_num_seqs=2, max_num_batched_tokens=20)
    for rid in "abc":
        s.add_request(rid, 2, 5)
    assert set(step(s).num_scheduled_tokens) == {"a", "b"}


def test_fastdeploy_decode_granted_one_runs_k_plus_one_rows():
    s = scheduler("fastdeploy-v0", max_num_batched_tokens=64, max_num_seqs=8, num_speculative_tokens=4,
                  method="mtp")
    s.add_request("a", 10, 20)
    step(s)
    record = s.schedule()
    assert record.num_scheduled_tokens == {"a": 1}
    assert record.runner_rows == {"a": 5} and record.scheduled_draft_tokens == {"a": 4}


def test_fastdeploy_v0_overflows_the_runner():
    s = scheduler("fastdeploy-v0", max_num_batched_tokens=64, max_num_seqs=8, num_speculative_tokens=4,
                  method="mtp", max_model_len=512, num_kv_blocks=512)
    for i in range(4):
        s.add_request(str(i), 8, 50)
    step(s)
    s.add_request("long", 200, 4)
    record = s.schedule()
    assert record.total_scheduled_tokens == 64  # 4 decodes charged 1 + a 60-token chunk
    assert record.total_runner_rows == 4 * 5 + 60
    assert {v.invariant for v in check_step(record)} == {"input-rows-cap"}


def test_fastdeploy_unvisited_decodes_run_on_their_own_blocks_or_pause():
    # B = S * t: with both seats decoding the budget is 0 and the loop visits nobody
    s = scheduler("fastdeploy-decode-count", max_num_batched_tokens=4, max_num_seqs=2, num_speculative_tokens=1,
                  method="mtp", block_size=4, num_kv_blocks=64, max_model_len=64)
    s.add_request("a", 1, 2)
    s.add_request("b", 3, 3)
    assert step(s).num_scheduled_tokens == {"a": 1, "b": 3}
    record = step(s)
    assert record.initial_token_budget == 0
    assert record.num_scheduled_tokens == {"a": 1}  # its 1 + 1 + L slots fit in the block it holds
    assert record.paused == frozenset({"b"}) and "b" not in record.runner_rows
    record = step(s)  # "a" finished: budget 4 - 2, "b" is visited and gets a block
    assert record.num_scheduled_tokens == {"b": 1} and record.paused == frozenset()


class GrantOnlyWithBudget(FastDeployDecodeCount):
    """A user's grant that relies on its contract: it is asked only while the exit rule lets the pass go on."""

    def grant(self, p, demand, b):
        assert b.token > 0, "grant asked with the budget spent"
        return super().grant(p, demand, b)


def test_a_decode_run_whatever_the_budget_never_asks_the_policy_for_a_grant():
    cfg = BudgetConfig(max_num_batched_tokens=4, max_num_seqs=2, num_speculative_tokens=1, method="mtp",
                       block_size=4, num_kv_blocks=64, max_model_len=64)
    s = scheduler_for(cfg, GrantOnlyWithBudget())
    s.add_request("a", 1, 2)
    s.add_request("b", 3, 3)
    step(s)
    record = step(s)  # B - S * t = 4 - 2 * 2: "a" runs on its own block with the budget at 0
    assert record.initial_token_budget == 0 and record.num_scheduled_tokens == {"a": 1}


def test_fastdeploy_ignores_long_prefill_token_threshold():
    knobs = dict(max_num_batched_tokens=64, max_num_seqs=8, max_model_len=512, num_kv_blocks=512)
    a, b = scheduler("fastdeploy-v0", **knobs), scheduler("fastdeploy-v0", long_prefill_token_threshold=8, **knobs)
    for s in (a, b):
        s.add_request("p", 300, 4)
        s.add_request("q", 300, 4)
    assert step(a).num_scheduled_tokens == step(b).num_scheduled_tokens == {"p": 64}


def test_progress_possible_means_a_grant():
    s = scheduler(**SPEC)
    s.add_request("a", 5, 3)
    record = s.schedule()
    assert record.progress_possible and record.total_scheduled_tokens > 0
    empty = scheduler().schedule()
    assert not empty.progress_possible and empty.total_scheduled_tokens == 0


@pytest.mark.parametrize("chunked", [True, False])
def test_fastdeploy_chunks_whatever_enable_chunked_prefill_says(chunked):
    """FastDeploy's V1 scheduler has no unchunked path: a prompt longer than the budget is
    split the same way with the knob on or off (vLLM would wait for the whole prompt)."""
    s = scheduler("fastdeploy-decode-count", max_num_batched_tokens=64, max_num_seqs=4, max_model_len=64,
                  enable_chunked_prefill=chunked)
    s.add_request("0", 40, 4)
    s.add_request("1", 40, 4)
    assert step(s).num_scheduled_tokens == {"0": 40, "1": 24}


@pytest.mark.parametrize("policy", ["vllm-adaptive", "fastdeploy-reserve", "trtllm"])  # SGLang: no prefix cache
def test_shared_block_keys_are_the_blocks_two_running_requests_hold(policy):
    """The pool's set of shared blocks against the record's own block tables, step by step,
    through prefix hits, preemptions and finishes."""
    rng = random.Random(0)
    s = scheduler(policy, num_kv_blocks=24, enable_prefix_caching=True)
    shared_steps = 0
    for n in range(60):
        if rng.random() < 0.6:
            s.add_request(str(n), rng.randint(9, 30), rng.randint(1, 8), prefix_group=rng.choice(("sys", "doc")),
                          prefix_len=8)
        record = s.schedule()
        held = Counter(b for table in record.block_tables.values() for b in table)
        assert record.block_keys == {b: s.pool.key_of.get(b) for b, count in held.items() if count > 1}
        shared_steps += bool(record.block_keys)
        s.update_from_output(record, {})
    assert shared_steps > 5
