"""FastDeploy's paused decode on the torch runner: 0 rows, its tokens and drafts kept."""
from __future__ import annotations

from tokenbudget.kernels.replay import replay_on_runner
from tokenbudget.kernels.target import RunnerOptions
from tokenbudget.model.findings import FINDINGS
from tokenbudget.spec.corpus import corpus_paths
from tokenbudget.spec.trace import load_trace


def test_a_paused_decode_runs_zero_rows_and_resumes() -> None:
    path = next(p for p in corpus_paths() if p.stem == "fastdeploy-decode-count-paused-decode")
    result, target = replay_on_runner(load_trace(path), RunnerOptions())
    assert result.ok, "; ".join(result.problems)
    assert target is not None
    steps = target.report.steps
    assert steps[1].rows == {"a": 2, "b": 0}  # 'a' runs 1 + k on its own block; 'b' is paused
    assert steps[2].rows == {"b": 2} and steps[2].committed >= 1  # visited, given a block, resumed
    assert all(s.fault is None for s in steps)


def test_the_deadlock_trace_runs_nothing_after_its_prefill() -> None:
    result, target = replay_on_runner(load_trace(FINDINGS["F5"].trace_path), RunnerOptions())
    assert target is not None
    assert "progress" in {v.invariant for v in result.violations}
    assert target.report.steps[0].rows == {"a": 1}
    assert all(s.rows == {"a": 0} and s.committed == 0 for s in target.report.steps[1:])


def test_the_full_batch_stall_is_a_fixpoint_on_the_runner_too() -> None:
    """FastDeploy #7499 at S = 32, B = 64 on the runner (which steps the model's loop, so its
    records carry the model's fingerprint): progress at the first fixpoint step, 69."""
    path = next(p for p in corpus_paths() if p.stem == "fastdeploy-decode-count-full-batch-fixpoint")
    result, target = replay_on_runner(load_trace(path), RunnerOptions())
    assert target is not None and result.ok, "; ".join(result.problems)
    fixpoints = [v.step for v in result.violations if "changed nothing" in v.message]
    assert fixpoints == [69]
    assert all(s.rows == {} or set(s.rows.values()) == {0} for s in target.report.steps[69:])
