"""SGLang's step on the model: prefill or decode, admission budgets, decode retraction."""
from __future__ import annotations

from dataclasses import replace

import pytest

from tokenbudget.model import BudgetConfig, ConfigError, get_policy
from tokenbudget.model.findings import FINDINGS, explaining_finding
from tokenbudget.model.replay import replay_on_model
from tokenbudget.model.sglang.loop import SglangLoop, clipped_max_new
from tokenbudget.model.target import ModelTarget
from tokenbudget.spec.corpus import CORPUS_DIR
from tokenbudget.spec.invariants import check_step
from tokenbudget.spec.trace import AddOp, load_trace

SGLANG = ("sglang-0.5.23", "sglang-v1-retract", "sglang-v1-retract-fixed", "sglang-v1-page-boundary")


def _cfg(**changes: object) -> BudgetConfig:
    base = dict(max_num_batched_tokens=64, max_num_seqs=8, num_speculative_tokens=2, method="eagle3", block_size=1,
                num_kv_blocks=200, max_model_len=32)
    return BudgetConfig(**{**base, **changes})  # type: ignore[arg-type]


def _target(policy: str, **changes: object) -> ModelTarget:
    return ModelTarget(_cfg(**changes), get_policy(policy))


@pytest.mark.parametrize("policy", SGLANG)
def test_a_step_is_a_prefill_or_a_decode(policy: str) -> None:
    t = _target(policy)
    t.add(AddOp("a", 4, 8))
    rec, _ = t.step({})
    assert rec.num_scheduled_tokens == {"a": 4} and rec.prefill == frozenset({"a"})
    t.add(AddOp("b", 3, 8))
    rec, _ = t.step({})  # a prefill forms for b: a does not decode in the same step
    assert rec.num_scheduled_tokens == {"b": 3}
    rec, _ = t.step({})
    assert rec.num_scheduled_tokens == {"a": 3, "b": 3} and rec.scheduled_draft_tokens == {"a": 2, "b": 2}
    assert rec.total_runner_rows == 6 and not check_step(rec)


def test_admission_reserves_the_running_requests_future() -> None:
    t = _target("sglang-0.5.23", num_kv_blocks=60)
    for i in range(4):
        t.add(AddOp(f"r{i}", 4, 24))
    rec, _ = t.step({})
    # each admission takes extend + max_new = 28 of the 60 free tokens: the third does not fit
    assert list(rec.num_scheduled_tokens) == ["r0", "r1"]
    assert t.scheduler.batch_is_full


def test_an_extend_past_the_budget_is_chunked_and_continues_first() -> None:
    t = _target("sglang-0.5.23", max_num_batched_tokens=24, max_model_len=64, num_kv_blocks=300)
    t.add(AddOp("long", 40, 4))
    t.add(AddOp("short", 2, 4))
    rec, _ = t.step({})
    assert rec.num_scheduled_tokens == {"long": 24}
    rec, _ = t.step({})
    assert rec.num_scheduled_tokens["long"] == 16 and "short" in rec.num_scheduled_tokens


def test_the_released_decode_reserves_two_allocations() -> None:
    t = _target("sglang-0.5.23")
    t.add(AddOp("a", 4, 8))
    t.step({})
    t.step({})
    req = t.scheduler.requests["a"]
    assert t.scheduler.allocated(req) == 4 + 2 * 3  # committed + 2A


def test_the_v1_verify_frees_rejected_drafts() -> None:
    t = _target("sglang-v1-retract")
    t.add(AddOp("a", 4, 8))
    t.step({})
    t.step({"a": 0})
    req = t.scheduler.requests["a"]
    assert t.scheduler.allocated(req) == req.num_computed_tokens


@pytest.mark.parametrize("policy", SGLANG)
def test_the_pool_must_hold_a_lone_request_and_its_reservation(policy: str) -> None:
    pol = get_policy(policy)
    need = pol.min_pool_tokens(_cfg())
    pol.validate(_cfg(num_kv_blocks=need))
    with pytest.raises(ConfigError, match="num_kv_blocks"):
        pol.validate(_cfg(num_kv_blocks=need - 1))


def test_the_corpus_trace_of_the_retraction_bug_is_clean_once_fixed() -> None:
    trace = load_trace(CORPUS_DIR / "sglang-v1-retract-decode-oom.json")
    assert {v.invariant for v in replay_on_model(trace).violations} == {"kv-capacity"}
    assert not replay_on_model(trace, "sglang-v1-retract-fixed").violations


def test_the_released_retraction_pops_the_fewest_outputs_then_the_longest_prompt() -> None:
    """retract_decode sorts by (output length, -prompt length), largest first, and pops the end;
    the retracted request frees its KV, waits at the back, and the ratio is re-estimated up."""
    t = _target("sglang-0.5.23", num_kv_blocks=60)
    for i in range(5):
        t.add(AddOp(f"r{i}", 4 + i, 24))
    loop = t.scheduler
    for _ in range(20):
        ratio = loop.new_token_ratio
        rec, _ = t.step({rid: 2 for rid in loop.requests})
        assert not check_step(rec), rec.step
        if rec.preempted:
            break
    assert rec.preempted == ("r1",) and list(rec.num_scheduled_tokens) == ["r0"]  # r0, r1 tie on outputs
    assert loop.waiting[-1].request_id == "r1" and loop.allocated(loop.requests["r1"]) == 0
    assert loop.new_token_ratio > ratio


def test_a_kv_that_ends_on_a_full_page_is_uncounted_after_the_page_check_fix() -> None:
    """Finding F6: PR #14180's check skips seqlen % page == 1 when page > 2 + 2k; the check
    before it (only that residue) and the released per-request reservation both cover it."""
    f6 = FINDINGS["F6"]
    trace = load_trace(f6.trace_path)
    cfg = BudgetConfig.from_dict(trace.config)
    for policy in ("sglang-v1-retract-fixed", "sglang-v1-retract"):
        run = replay_on_model(trace, policy).run
        assert run is not None and f6.shows(cfg, run)
        assert explaining_finding(trace, "kv-capacity", policy) == f6
    for policy in ("sglang-0.5.23", "sglang-v1-page-boundary"):
        result = replay_on_model(trace, policy)
        assert not result.violations and result.run is not None and not f6.shows(cfg, result.run)
        assert explaining_finding(trace, "kv-capacity", policy) is None
    pol = get_policy("sglang-v1-retract-fixed")
    assert f6.opens(pol, cfg) and not f6.opens(pol, cfg.replace(num_speculative_tokens=3))  # page 8 <= 2 + 2 * 3
    ngram = load_trace(CORPUS_DIR / "sglang-v1-retract-decode-oom.json")  # #14942 at page 1: not this mechanism
    run = replay_on_model(ngram).run
    assert run is not None and not f6.shows(BudgetConfig.from_dict(ngram.config), run)


def test_without_chunked_prefill_a_prompt_is_admitted_whole_or_waits() -> None:
    """schedule_policy.py:1626-1632: no cut; after the first request, one whose page-ceiled
    extend reaches the budget left waits for the next prefill, where it is first."""
    t = _target("sglang-0.5.23", enable_chunked_prefill=False, max_num_batched_tokens=40, max_model_len=40)
    t.add(AddOp("a", 8, 4))
    t.add(AddOp("b", 32, 4))
    first, _ = t.step({})
    assert first.num_scheduled_tokens == {"a": 8}
    second, _ = t.step({})
    assert second.num_scheduled_tokens == {"b": 32}
    with pytest.raises(ConfigError, match="ceiled to block_size"):
        _target("sglang-0.5.23", enable_chunked_prefill=False, max_num_batched_tokens=40, max_model_len=42,
                block_size=4)


def _grants(t: ModelTarget) -> dict[str, int]:
    return dict(t.step({})[0].num_scheduled_tokens)


def test_an_admission_asks_and_reserves_a_page_more_and_its_max_new() -> None:
    """add_one_req asks extend + max_new + page < rem_total_tokens and reserves the ceiled
    extend, a page and max_new: on 22 tokens, request 0 (4 + 4) leaves 22 - 9 = 13, so a
    second request of 6 + 6 (+ 1) is refused and one of 5 + 5 (+ 1) admitted."""
    for prompt, admitted in ((6, False), (5, True)):
        t = _target("sglang-0.5.23", max_num_seqs=4, max_model_len=16, num_speculative_tokens=1, num_kv_blocks=22)
        t.add(AddOp("0", 4, 4))
        t.add(AddOp("1", prompt, prompt))
        assert _grants(t) == ({"0": 4, "1": prompt} if admitted else {"0": 4})
        assert t.scheduler.batch_is_full is not admitted  # NO_TOKEN with a request admitted sets the latch


def test_the_continuing_chunk_is_not_floored_to_a_page() -> None:
    """The first admission's cut is floored to a page (8 of B = 10 at page 4); the chunk that
    continues takes min(extend, rem_chunk_tokens, rem_total_tokens), here 10."""
    t = _target("sglang-0.5.23", max_num_batched_tokens=10, max_num_seqs=2, block_size=4, max_model_len=64,
                num_kv_blocks=100)
    t.add(AddOp("long", 30, 4))
    assert _grants(t) == {"long": 8}
    assert _grants(t) == {"long": 10}
    assert _grants(t) == {"long": 10}
    assert _grants(t) == {"long": 2}


def test_an_aborted_decode_clears_the_latch_one_decode_later() -> None:
    """SGLang marks an aborted running request to_finish: it decodes once more and leaves at
    the next filter_batch, which clears batch_is_full. Two seats latch the batch; after an
    abort the next step still decodes, the one after admits the waiting request."""
    t = _target("sglang-0.5.23", max_num_seqs=2)
    for rid in ("a", "b", "c"):
        t.add(AddOp(rid, 4, 8))
    assert _grants(t) == {"a": 4, "b": 4} and t.scheduler.batch_is_full
    assert _grants(t) == {"a": 3, "b": 3}
    t.abort("a")
    assert _grants(t) == {"b": 3}
    assert _grants(t) == {"c": 4}


def test_the_batch_left_after_a_retraction_keeps_the_retraction_order() -> None:
    """retract_decode ends with filter_batch(keep_indices=sorted_indices): the running batch
    takes the retraction order (fewest outputs, then the longest prompt, last), which breaks
    the ties of the next retraction."""
    t = _target("sglang-0.5.23", num_kv_blocks=116)
    for i in range(5):
        t.add(AddOp(f"r{i}", 8 - i, 16))
    loop = t.scheduler
    for _ in range(40):
        rec, _ = t.step({})
        if rec.preempted:
            break
    assert rec.preempted
    kept = [r.request_id for r in loop.running]
    key = {r.request_id: (r.num_output_tokens, -r.num_prompt_tokens) for r in loop.running}
    assert len(kept) > 1 and kept == sorted(kept, key=key.__getitem__, reverse=True)
    assert kept != sorted(kept)  # not the arrival order: the shorter prompts run first now


def test_the_ratio_after_a_retraction_divides_by_max_new_clipped_on_arrival() -> None:
    """``estimate_new_token_ratio_after_retract`` sums ``sampling_params.max_new_tokens``, max_tokens
    clipped on arrival to max_req_len - prompt - 1: r0's 46 counts 18 - 1 - 1 - 1 = 15, so
    (2 outputs + 20 * 2) / (15 + 2 + 1) is past 1 and the ratio is 1.0; r0's future, 14 tokens at
    that ratio, leaves room to readmit the retracted r2 (SGLang 0.5.23 does the same on this trace)."""
    t = ModelTarget(_cfg(max_num_batched_tokens=60, max_num_seqs=10, num_speculative_tokens=5, num_kv_blocks=36,
                         max_model_len=18), get_policy("sglang-0.5.23"))
    for i, max_tokens in enumerate([46, 2, 6]):
        t.add(AddOp(f"r{i}", 1, max_tokens))
    assert t.scheduler.requests["r0"].max_tokens == 15
    t.step({})
    rec, _ = t.step({})
    assert rec.preempted == ("r2",) and t.scheduler.new_token_ratio == 1.0
    rec, _ = t.step({})
    assert rec.num_scheduled_tokens == {"r2": 2}


def test_max_new_tokens_is_clipped_on_arrival_as_sglang_clips_it() -> None:
    """``init_req_max_new_tokens`` (scheduler.py:2709-2716): max_req_len - input_len - 1, max_req_len
    the context or the pool less one (tp_worker.py:568-571); and the empty pool less the page-ceiled
    prompt and a page (``max_new_tokens_for_memory``)."""
    assert clipped_max_new(_cfg(max_model_len=32), 10, 100) == 32 - 1 - 10 - 1
    assert clipped_max_new(_cfg(max_model_len=32, num_kv_blocks=20), 10, 100) == 20 - 10 - 1 - 1
    assert clipped_max_new(_cfg(max_model_len=32, block_size=4, num_kv_blocks=8), 5, 100) == 32 - 8 - 4 - 1
    assert clipped_max_new(_cfg(), 10, 3) == 3
    t = _target("sglang-0.5.23", max_model_len=32)
    longest = SglangLoop.longest_prompt(t.scheduler.cfg)
    assert longest == 32 - 1 - 5 - 1  # validate_input_length: len >= max_req_input_len = max_req_len - 5 is aborted
    t.add(AddOp("a", longest, 100))
    with pytest.raises(ValueError, match="prompt_len must be 1..25"):
        t.add(AddOp("b", longest + 1, 100))
    for _ in range(40):
        t.step({})
    assert t.scheduler.requests["a"].num_output_tokens == 32 - 1 - longest - 1


def test_f8_a_page_one_decode_with_k_8_reserves_past_its_row() -> None:
    trace = load_trace(FINDINGS["F8"].trace_path)
    result = replay_on_model(trace)
    assert result.ok and [v.step for v in result.violations if v.invariant == "model-len"] == [4]
    finding = explaining_finding(trace, "model-len")
    assert finding is not None and finding.id == "F8"
    seven = replace(trace, config={**trace.config, "num_speculative_tokens": 7}, expect=())
    assert not replay_on_model(seven).violations  # k = 7: 12 + 16 = 28 <= 16 + 4 + 8
