"""vLLM's AsyncScheduler as the vLLM target runs it by default: outputs one step late, the
placeholder drafts, the stale ones vLLM PR #46899 describes, and ``--sync``."""
from __future__ import annotations

import pytest

from tokenbudget.cli import main
from tokenbudget.harness.lockstep import run_lockstep
from tokenbudget.harness.vllm.async_runner import SYNC_ENV
from tokenbudget.harness.vllm.target import VllmTarget
from tokenbudget.model import BudgetConfig, get_policy
from tokenbudget.spec.trace import AddOp, StepOp, Trace

pytestmark = [pytest.mark.vllm, pytest.mark.usefixtures("vllm_imported")]

ADAPTIVE = get_policy("vllm-adaptive")
CFG = BudgetConfig(max_num_batched_tokens=24, max_num_seqs=8, block_size=16, num_kv_blocks=64, max_model_len=256,
                   num_speculative_tokens=3, method="eagle3")


def _starved_tail() -> Trace:
    """Six decodes of 1 + k fill B = 24; the seventh waits until the first finishes."""
    adds = [AddOp(f"r{j}", prompt_len=2, max_tokens=6 if j == 0 else 30) for j in range(7)]
    steps = [StepOp(accepted={f"r{j}": 1 for j in range(7)}) for _ in range(6)]
    return Trace(config=CFG.to_dict(), policy="vllm-adaptive", ops=[*adds, *steps])


def test_the_vllm_target_runs_async_on_request_and_sync_by_default(monkeypatch) -> None:
    assert type(VllmTarget(CFG, ADAPTIVE).engine.scheduler).__name__ == "Scheduler"
    monkeypatch.setenv(SYNC_ENV, "0")  # what --async sets
    target = VllmTarget(CFG, ADAPTIVE)
    assert target.cfg.async_scheduling and type(target.engine.scheduler).__name__ == "AsyncScheduler"
    ngram = VllmTarget(CFG.replace(method="ngram"), ADAPTIVE)  # vLLM serves the CPU n-gram drafter sync
    assert not ngram.cfg.async_scheduling and type(ngram.engine.scheduler).__name__ == "Scheduler"
    monkeypatch.setenv(SYNC_ENV, "1")
    assert type(VllmTarget(CFG, ADAPTIVE).engine.scheduler).__name__ == "Scheduler"


def test_real_vllm_schedules_placeholders_left_from_an_earlier_step_and_the_model_agrees(monkeypatch) -> None:
    monkeypatch.setenv(SYNC_ENV, "0")  # what --async sets
    cfg = CFG.replace(parallel_drafting=True)  # parallel EAGLE runs on the V1 model runner (F9)
    target = VllmTarget(cfg, ADAPTIVE)
    for op in _starved_tail().ops:
        if isinstance(op, AddOp):
            target.add(op)
    records = [target.step(dict(op.accepted))[0] for op in _starved_tail().ops if isinstance(op, StepOp)]
    assert [sorted(r.stale_drafts) for r in records] == [[], [], [], [], ["r4"], []]
    assert records[4].scheduled_draft_tokens["r4"] == 3 and not records[4].padded
    trace = Trace(config=cfg.to_dict(), policy="vllm-adaptive", ops=_starved_tail().ops)
    result = run_lockstep(trace, VllmTarget, cfg.replace(async_scheduling=True))
    assert result.agrees and result.steps_agreeing == 6


def test_model_runner_v2_keeps_drafts_so_real_vllm_flags_none(monkeypatch) -> None:
    monkeypatch.setenv(SYNC_ENV, "0")
    target = VllmTarget(CFG, ADAPTIVE)
    for op in _starved_tail().ops:
        if isinstance(op, AddOp):
            target.add(op)
    assert all(not target.step(dict(op.accepted))[0].stale_drafts for op in _starved_tail().ops if isinstance(op, StepOp))


def test_conform_sync_and_async_both_run(capsys, monkeypatch) -> None:
    monkeypatch.setenv(SYNC_ENV, "1")  # restored after the test, whatever --async sets
    assert main(["conform", "--engine", "vllm", "--workloads", "5", "--seed", "3", "--async"]) == 0
    assert main(["conform", "--engine", "vllm", "--workloads", "5", "--seed", "3", "--sync"]) == 0
