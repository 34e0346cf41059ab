"""The FastDeploy model keyed by commit (``tokenbudget/model/fastdeploy/commits.py``, ``tokenbudget/model/fastdeploy/worker.py``):
the block rules' arithmetic as cited, the worker's pause, each built-in naming its commits, and F5
at each commit that has it. No FastDeploy needed (``tests/fastdeploy/`` runs the real code)."""
from __future__ import annotations

from pathlib import Path

import pytest

from tokenbudget.model import BudgetConfig, ConfigError, get_policy
from tokenbudget.model.fastdeploy import commits as commits
from tokenbudget.model.fastdeploy import worker as worker
from tokenbudget.model.findings import FINDINGS, explaining_finding
from tokenbudget.model.replay import replay_on_model
from tokenbudget.spec.trace import AddOp, StepOp, load_trace
from dataclasses import replace

F5 = Path(__file__).resolve().parents[2] / "tokenbudget" / "corpus" / "findings" / "f5-fastdeploy-spec-method-full-batch-deadlock.json"


def test_the_decode_preallocation_threshold_per_commit() -> None:
    assert commits.FASTDEPLOY_COMMITS["2a606e361"].prealloc_threshold(4, 64) == 12
    row = commits.FASTDEPLOY_COMMITS["564c78d78"]  # #7471: min(12 (k + 1), 2 block - 1)
    assert row.prealloc_threshold(1, 64) == 24 and row.prealloc_threshold(4, 64) == 60
    assert row.prealloc_threshold(1, 4) == 7 and row.prealloc_threshold(3, 1) == 1


def test_a_chunk_takes_one_block_more_with_a_method_and_at_most_a_table() -> None:
    assert commits.new_blocks(0, 5, 0, 4, 8, speculative=True) == 3  # cdiv(5, 4) + 1
    assert commits.new_blocks(0, 5, 0, 4, 8, speculative=False) == 2
    assert commits.new_blocks(4, 4, 3, 4, 8, speculative=True) == 0  # holds 3 blocks for 8 tokens
    assert commits.new_blocks(0, 64, 0, 4, 8, speculative=True) == 8  # capped at max_model_len // block


def test_the_admission_threshold_before_and_after_the_token_ratio() -> None:
    assert commits.admission_blocks(3, 2, 16, relaxed=True, max_blocks=100, speculative=True) == 3
    assert commits.admission_blocks(3, 2, 16, relaxed=False, max_blocks=100, speculative=True) == 36
    assert commits.admission_blocks(3, 2, 16, relaxed=False, max_blocks=20, speculative=True) == 20
    assert commits.ratio_admission_blocks(3, 5, 100, speculative=True) == 9
    assert commits.ratio_reserve_blocks(max_tokens=100, outputs=10, ratio=0.7, block_size=8) == 8  # int(63) -> 8
    assert commits.ratio_after_preemption(0, 0, 0, 64, running=0) == commits.RATIO_INIT
    assert commits.ratio_after_preemption(10, 99, 0, 64, running=2) == pytest.approx(0.1)


def test_the_worker_pauses_where_speculate_schedule_cache_looks() -> None:
    # block 4, k = 2: max_next_step_tokens 6; written 2 -> block (2 + 6) // 4 = 2
    assert worker.decode_pauses(2, held_blocks=2, k=2, block_size=4, max_model_len=16)
    assert not worker.decode_pauses(2, held_blocks=3, k=2, block_size=4, max_model_len=16)
    assert not worker.decode_pauses(10, held_blocks=3, k=2, block_size=4, max_model_len=16)  # block 4: past the table
    assert worker.tokens_kept(3, 2, output_tokens=0, max_tokens=10, num_tokens=5, max_model_len=16) == 3
    assert worker.tokens_kept(1, 2, output_tokens=9, max_tokens=10, num_tokens=5, max_model_len=16) == 1


@pytest.mark.parametrize("name", ["fastdeploy-reserve", "fastdeploy-decode-count", "fastdeploy-spec-method"])
def test_each_builtin_names_the_commits_it_models(name: str) -> None:
    policy = get_policy(name)
    assert policy.versions and all(commits.FASTDEPLOY_COMMITS[c].policy == name for c in policy.versions)
    cfg = BudgetConfig(max_num_batched_tokens=64, max_num_seqs=4, num_speculative_tokens=1, method="mtp",
                       block_size=16, num_kv_blocks=64, max_model_len=64, enable_prefix_caching=False)
    for commit in policy.versions:
        policy.validate(replace(cfg, engine_version=commit))
    with pytest.raises(ConfigError, match="engine_version"):
        policy.validate(replace(cfg, engine_version="0000000"))


@pytest.mark.parametrize("commit", ["2a606e361", "564c78d78"])
def test_f5_at_each_commit_that_has_it(commit: str) -> None:
    trace = load_trace(F5)
    at = replace(trace, config={**trace.config, "engine_version": commit}, expect=())
    result = replay_on_model(at)
    assert {v.invariant for v in result.violations} == {"progress"}
    finding = explaining_finding(at, "progress")
    assert finding is not None and finding.id == "F5"


def test_f7_a_lone_chunk_refused_for_its_own_reserve_at_564c78d78_only() -> None:
    trace = load_trace(FINDINGS["F7"].trace_path)
    result = replay_on_model(trace)
    assert result.ok and {v.invariant for v in result.violations} == {"progress"}
    finding = explaining_finding(trace, "progress")
    assert finding is not None and finding.id == "F7"
    before = replace(trace, config={**trace.config, "engine_version": "2a606e361"}, expect=())
    assert not replay_on_model(before).violations  # the output reserve before #7498 counts no running prefill


def test_without_a_commit_the_loop_keeps_the_paged_pool() -> None:
    trace = load_trace(F5)
    plain = replay_on_model(trace)
    assert {v.invariant for v in plain.violations} == {"progress"}
    assert plain.ok  # the trace's own expectations, written for the model without a commit


@pytest.mark.parametrize("commit", ["2a606e361", "564c78d78"])
def test_a_model_len_off_the_block_grid_is_refused_as_the_gpu_worker_refuses_it(commit: str) -> None:
    """max_block_num_per_seq = max_model_len // block_size caps a one-chunk prompt's blocks; at
    max_model_len 520, block 16 a 518-token prompt got 32 blocks (512 slots), a kv-capacity
    the fuzzer drew at 2a606e361. FastDeploy's GPU worker never starts so (append_attn_backend.py:79)."""
    policy = get_policy("fastdeploy-spec-method")
    cfg = BudgetConfig(max_num_batched_tokens=1024, max_num_seqs=4, num_speculative_tokens=1, method="mtp",
                       block_size=16, num_kv_blocks=40, max_model_len=520, engine_version=commit)
    with pytest.raises(ConfigError, match="multiple of block_size"):
        policy.validate(cfg)
    with pytest.raises(ConfigError, match="multiple of 64"):  # on the block grid, off the backend's 64
        policy.validate(replace(cfg, max_model_len=528))
    on_grid = replace(cfg, max_model_len=576)
    with pytest.raises(ConfigError, match="pool of at least max_model_len // block_size \\+ 2 = 38 blocks"):
        policy.validate(replace(on_grid, num_kv_blocks=37))
    policy.validate(on_grid)
    trace = load_trace(F5)
    longest = replace(trace, policy=policy.name, config=on_grid.to_dict(), expect=(),
                      ops=(AddOp(id="a", prompt_len=574, max_tokens=1), StepOp(accepted={})))
    assert not replay_on_model(longest).violations  # 576 // 16 = 36 blocks hold any prompt the engine takes
