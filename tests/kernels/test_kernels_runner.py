"""The torch runner executes the scheduler's steps: the corpus, a long live run, the faults."""
from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
import torch

from tokenbudget.spec.corpus import corpus_paths
from tokenbudget.kernels.attention import dense_attend
from tokenbudget.kernels.drafting import ngram_propose
from tokenbudget.kernels.errors import KVOverflow
from tokenbudget.kernels.models import MODEL_SPECS, TinyLM
from tokenbudget.kernels.runner import ModelRunner
from tokenbudget.cli import main
from tokenbudget.kernels.target import RunnerOptions, RunnerTarget, runner_refusal
from tokenbudget.model.replay import replay_on_model
from tokenbudget.kernels.arrivals import extend
from tokenbudget.model import BudgetConfig, get_policy, scheduler_for
from tokenbudget.model.methods import MODEL_DRAFTER
from tokenbudget.kernels.replay import replay_on_runner
from tokenbudget.spec.trace import ConfigRejectedExpectation, Trace, load_trace

LONG = Trace(policy="vllm-adaptive", config={
    "max_num_batched_tokens": 64, "max_num_seqs": 8, "num_speculative_tokens": 3, "method": "eagle3",
    "parallel_drafting": False, "block_size": 16, "num_kv_blocks": 24, "max_model_len": 256}, ops=())


def first_step(steps: list[int]) -> int | None:
    return min(steps, default=None)


def assert_lossless(target: RunnerTarget, trace: Trace) -> None:
    """Greedy speculative decoding commits what plain greedy decoding with dense attention
    would: every output token is the target's argmax after the tokens before it."""
    model: TinyLM = target.runner.model
    prompts = {op.id: op.prompt_len for op in trace.ops if hasattr(op, "prompt_len")}
    sequences = {**target.runner.finished, **target.runner.tokens}
    assert sequences
    with torch.inference_mode():
        for rid, tokens in sequences.items():
            positions = torch.arange(len(tokens))
            hidden = model.hidden(torch.tensor(tokens), positions, dense_attend(positions), model.spec.num_layers)
            greedy = model.logits(hidden).argmax(-1).tolist()
            assert tokens[prompts[rid]:] == greedy[prompts[rid] - 1:-1], rid


def _runner_refuses(path: Path) -> bool:
    trace = load_trace(path)
    return runner_refusal(BudgetConfig.from_dict(trace.config), get_policy(trace.policy)) is not None


def _runner_corpus() -> list[Path]:
    """Corpus traces the torch runner executes faithfully (``runner_refusal``)."""
    return [p for p in corpus_paths() if not _runner_refuses(p)]


def test_a_trace_drafted_after_the_step_is_refused_not_misjudged(capsys: pytest.CaptureFixture[str]) -> None:
    """SGLang's EAGLE drafts in the next decode's KV reservation: the runner, which drafts in the
    step that sampled, refuses its traces in one line (exit 2) instead of reporting an overflow."""
    refused = [p for p in corpus_paths() if _runner_refuses(p)]
    assert refused and all(load_trace(p).policy.startswith("sglang") for p in refused)
    assert main(["replay", str(refused[0]), "--target", "runner"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--target model" in err and "ngram" in err, err


def test_the_sglang_retraction_bug_overflows_the_runners_kv_where_the_model_says() -> None:
    """#14942 with an n-gram drafter (no drafter KV): the runner's verify writes past the KV the
    retraction left, at the step where the model reports kv-capacity; with the fix it runs clean."""
    trace = load_trace(next(p for p in corpus_paths() if load_trace(p).policy == "sglang-v1-retract"))
    ngram = replace(trace, config={**trace.config, "method": "ngram"})
    broken = {v.step for v in replay_on_model(ngram).violations if v.invariant == "kv-capacity"}
    result, target = replay_on_runner(ngram, RunnerOptions())
    assert target is not None and broken
    assert [e.split(":")[0] for e in result.errors] == [f"step {min(broken)}"] and "KVOverflow" in result.errors[0]
    fixed, target = replay_on_runner(replace(ngram, expect=()), RunnerOptions(), "sglang-v1-retract-fixed")
    assert target is not None and target.report.steps and not fixed.errors and not fixed.violations


@pytest.mark.parametrize("path", _runner_corpus(), ids=lambda p: p.stem)
def test_the_corpus_replays_on_the_runner(path: Path) -> None:
    trace = load_trace(path)
    result, target = replay_on_runner(trace, RunnerOptions())
    assert result.ok, "; ".join(result.problems)
    if any(isinstance(e, ConfigRejectedExpectation) for e in trace.expect):
        assert target is None
        return
    assert target is not None
    # The runner stops exactly where the spec first sees more rows than B, and only there.
    faults = [s.step for s in target.report.steps if s.fault is not None]
    overflows = [v.step for v in result.violations if v.invariant == "input-rows-cap"]
    assert first_step(faults) == first_step(overflows)
    assert all("InputRowsOverflow" in s.fault for s in target.report.steps if s.fault)
    raised = [v.step for v in result.violations if v.invariant == "model-error"]  # T1, T2: the engine's own throw
    if not faults:  # the runner runs every step the model's pass got through
        assert len(target.report.steps) == (min(raised) if raised else trace.num_steps)
        assert bool(result.errors) == bool(raised)


def test_the_fastdeploy_counterexample_overflows_the_buffers_in_step_2() -> None:
    path = next(p for p in corpus_paths() if p.stem == "fastdeploy-reserve-rows-overflow")
    result, target = replay_on_runner(load_trace(path), RunnerOptions())
    assert target is not None
    steps = target.report.steps
    assert [s.fault is None for s in steps] == [True, True, False]
    assert (steps[2].total_rows, steps[2].capacity) == (528, 520)
    assert steps[2].fault.startswith("InputRowsOverflow: step 2: needs 528 input rows")
    assert steps[1].rows == {"0": 5, "1": 5, "2": 5, "3": 5} and steps[1].verified == 16  # granted 1, ran 1 + k
    assert result.errors == (f"step 2: {steps[2].fault}",)


def test_a_long_vllm_adaptive_live_run_stays_within_b_and_is_lossless() -> None:
    trace = extend(LONG, 200, seed=0)
    result, target = replay_on_runner(trace, RunnerOptions(mode="live"))
    assert target is not None
    assert not result.violations and not result.errors and target.report.fault is None
    rows = [s.total_rows for s in target.report.steps]
    assert len(rows) == 200 and max(rows) == 64  # the budget was pressed, never passed
    acceptance = target.report.acceptance
    assert acceptance is not None and 0.1 < acceptance < 0.95
    assert sum(len(s.preempted) for s in (result.steps)) > 0  # recompute after preemption is covered too
    assert_lossless(target, trace)
    for rid, tokens in target.runner.tokens.items():
        assert len(tokens) == target.scheduler.requests[rid].num_tokens


def test_parallel_drafting_fills_its_draft_rows_and_stays_lossless() -> None:
    trace = extend(replace(LONG, config={**LONG.config, "parallel_drafting": True}), 80, seed=1)
    result, target = replay_on_runner(trace, RunnerOptions(mode="live"))
    assert target is not None and not result.errors and not result.violations
    assert all(s.total_rows == sum(s.rows.values()) for s in target.report.steps)
    assert max(max(s.rows.values(), default=0) for s in target.report.steps) >= 1 + 3 + 2  # 1 + k rows + d = k - 1
    assert_lossless(target, trace)


def test_forced_replay_is_deterministic() -> None:
    path = next(p for p in corpus_paths() if p.stem == "fastdeploy-decode-count-safe")
    runs = [replay_on_runner(load_trace(path), RunnerOptions()) for _ in range(2)]
    (first, a), (second, b) = runs
    assert a is not None and b is not None
    assert first.to_json() == second.to_json()
    assert a.runner.finished == b.runner.finished and a.runner.finished
    timeless = [[{**s.to_json(), "seconds": 0} for s in t.report.steps] for t in (a, b)]
    assert timeless[0] == timeless[1]


def test_rejection_sampling_accepts_some_drafts_and_is_seeded() -> None:
    trace = extend(LONG, 60, seed=2)
    runs = [replay_on_runner(trace, RunnerOptions(mode="live", rule="rejection", seed=5)) for _ in range(2)]
    (result, a), (_, b) = runs
    assert a is not None and b is not None and not result.errors
    assert a.report.acceptance is not None and 0.0 < a.report.acceptance < 1.0
    assert {**a.runner.finished, **a.runner.tokens} == {**b.runner.finished, **b.runner.tokens}


def test_a_write_outside_the_request_blocks_is_a_kv_overflow() -> None:
    cfg = BudgetConfig(max_num_batched_tokens=64, max_num_seqs=4, num_speculative_tokens=2, method="eagle3",
                       num_kv_blocks=8, max_model_len=64)
    sched = scheduler_for(cfg, get_policy("vllm-adaptive"))
    runner = ModelRunner(sched.limits, MODEL_DRAFTER, MODEL_SPECS["tiny"])
    sched.add_request("a", 20, 4)
    runner.add_request("a", list(range(2, 22)))
    record = sched.schedule()
    short = replace(record, block_tables={"a": record.block_tables["a"][:1]})  # 16 slots for 20 tokens
    with pytest.raises(KVOverflow, match=r"step 0: request 'a' writes KV at position 16"):
        runner.execute(short)
    assert all(float(k.abs().sum()) == 0 for k in runner.cache.k)  # nothing was written
    assert runner.execute(record).committed == 1


def test_ngram_proposals_continue_the_latest_match() -> None:
    assert ngram_propose([5, 6, 7, 9, 5, 6], 3) == [7, 9, 5]
    assert ngram_propose([5, 6, 7, 5, 6], 4) == [7, 5, 6, 6]
    assert ngram_propose([1, 2, 3], 2) == [3, 3]
