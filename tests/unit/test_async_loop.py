"""The model of vLLM's AsyncScheduler (``model/vllm/async_loop.py``): outputs one step late,
placeholders and placeholder drafts, the in-flight max_tokens skip, stale placeholder drafts."""
from __future__ import annotations

import random

import pytest

from tokenbudget.model import BudgetConfig, ConfigError, get_policy
from tokenbudget.model.target import ModelTarget
from tokenbudget.model.vllm.async_loop import AsyncVllmLoop
from tokenbudget.spec import check_run, check_step
from tokenbudget.spec.execution import Execution
from tokenbudget.spec.trace import AddOp, StepOp

K = 3


def _target(**knobs: object) -> ModelTarget:
    base = dict(max_num_batched_tokens=64, max_num_seqs=8, block_size=16, num_kv_blocks=64, max_model_len=256,
                num_speculative_tokens=K, method="eagle3", engine_version="0.32", async_scheduling=True)
    return ModelTarget(BudgetConfig(**{**base, **knobs}), get_policy("vllm-adaptive"))


def test_async_config_builds_the_async_loop():
    assert type(_target().scheduler) is AsyncVllmLoop


def test_output_comes_one_step_late_and_drafts_are_placeholders_at_once():
    t = _target()
    t.add(AddOp("a", prompt_len=10, max_tokens=20))
    first, out0 = t.step({})
    assert first.num_scheduled_tokens == {"a": 10} and out0.requests["a"].num_output_tokens == 0
    second, out1 = t.step({"a": 2})  # the decode runs before the prefill's token is back: 1 + k placeholders
    assert second.num_scheduled_tokens == {"a": 1 + K} and second.scheduled_draft_tokens == {"a": K}
    assert out1.requests["a"].num_output_tokens == 1  # the prefill's sampled token, applied one step late
    _, out2 = t.step({})
    assert out2.requests["a"].num_output_tokens == 1 + 1 + 2  # step 1's bonus token and its 2 accepted drafts


def test_rejected_placeholder_drafts_are_given_back():
    t = _target()
    t.add(AddOp("a", prompt_len=10, max_tokens=50))
    t.step({})
    t.step({"a": 1})  # 1 of k accepted: k - 1 computed tokens rolled back when the output lands
    t.step({})
    req = t.scheduler.requests["a"]
    in_flight = t.scheduler.placeholders["a"]
    assert req.num_computed_tokens - in_flight == req.num_tokens - 1


def test_a_request_finished_by_its_in_flight_tokens_is_not_scheduled_again():
    t = _target()
    t.add(AddOp("a", prompt_len=10, max_tokens=1))
    t.step({})
    record, outcome = t.step({})
    assert record.num_scheduled_tokens == {} and outcome.requests["a"].status == "finished"


def _starved_tail_run(n: int = 7, **knobs: object) -> list:
    """Decodes of 1 + k and the parallel drafter's slots fill B = 24 (V1 runner); the tail one
    the budget leaves out runs later with the placeholder drafts it was given before."""
    t = _target(**{"max_num_batched_tokens": 24, "parallel_drafting": True, **knobs})
    for j in range(n):
        t.add(AddOp(f"r{j}", prompt_len=2, max_tokens=6 if j == 0 else 30))
    return [t.step({f"r{j}": 1 for j in range(n)})[0] for _ in range(6)]


def test_placeholders_left_from_an_earlier_step_are_flagged():
    records = _starved_tail_run()
    assert [sorted(r.stale_drafts) for r in records] == [[], [], [], [], ["r4"], []]
    assert {v.invariant for v in check_step(records[4])} == {"placeholder-fresh"}


@pytest.mark.parametrize("knobs", [{"parallel_drafting": False}, {"engine_version": "0.34", "method": "dflash"}])
def test_model_runner_v2_keeps_drafts_so_nothing_is_stale(knobs):
    assert all(not r.stale_drafts for r in _starved_tail_run(**knobs))


def test_sync_loop_never_flags_placeholders():
    t = _target(max_num_batched_tokens=24, async_scheduling=False)
    for j in range(7):
        t.add(AddOp(f"r{j}", prompt_len=2, max_tokens=6 if j == 0 else 30))
    assert all(not t.step({f"r{j}": 1 for j in range(7)})[0].stale_drafts for _ in range(6))


@pytest.mark.parametrize("seed", range(40))
def test_random_async_runs_keep_every_other_invariant(seed: int):
    rng = random.Random(seed)
    k = rng.choice([0, 2, 4])
    knobs: dict[str, object] = dict(max_num_batched_tokens=rng.choice([32, 64, 128]), max_num_seqs=rng.choice([2, 4, 8]),
                                    num_kv_blocks=rng.choice([16, 24, 64]), engine_version=rng.choice(["0.32", "0.33"]),
                                    num_speculative_tokens=k, method="mtp" if k else None,
                                    scheduling_policy=rng.choice(["fcfs", "priority"]))
    run = Execution(_target(**knobs))
    for i in range(50):
        if rng.random() < 0.35:
            run.apply(AddOp(f"r{i}", prompt_len=rng.randint(1, 120), max_tokens=rng.randint(1, 40),
                            priority=rng.randint(0, 3)))
        run.apply(StepOp(accepted={rid: rng.randint(0, k) for rid in run.target.scheduler.requests}))
    broken = {v.invariant for v in check_run(run.run)} - {"placeholder-fresh"}
    assert broken <= {"progress"} and not any(r.error for r in run.run.steps), broken


def test_async_refuses_what_vllm_serves_sync():
    with pytest.raises(ConfigError, match="async"):
        _target(method="ngram")
    with pytest.raises(ConfigError, match="async"):
        ModelTarget(BudgetConfig(async_scheduling=True), get_policy("fastdeploy-v0"))
