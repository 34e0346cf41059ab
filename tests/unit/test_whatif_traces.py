"""whatif on traces: a recorded run's trace times the same; the search's trace replays."""
from __future__ import annotations

from pathlib import Path

import pytest

from tokenbudget.model import BudgetConfig, get_policy
from tokenbudget.spec.corpus import corpus_paths
from tokenbudget.model.replay import replay_on_model
from tokenbudget.spec.trace import Trace, load_trace
from tokenbudget.whatif import metrics
from tokenbudget.whatif.cost_file import load
from tokenbudget.whatif.effective_budget import config_for
from tokenbudget.whatif.search import search
from tokenbudget.whatif.simulator import simulate
from tokenbudget.whatif.trace_delay import time_trace
from tokenbudget.whatif.workload import Lengths, synthetic

COST = load(Path("kimi-k2-h100x8"))
CFG = BudgetConfig(max_num_batched_tokens=2048, max_num_seqs=64, num_speculative_tokens=7, method="dspark",
                   engine_version="0.32", max_model_len=8192, num_kv_blocks=1 << 16)


def test_a_recorded_run_times_the_same_as_a_trace():
    load_ = synthetic(6, None, None, Lengths(100, 5000), Lengths(4, 40), (0.8, 0.5), 9)
    ops: list = []
    run = simulate(CFG, get_policy("vllm-static"), load_, COST, ops=ops)
    timing = time_trace(Trace("vllm-static", CFG.to_dict(), tuple(ops)), CFG, get_policy("vllm-static"), COST)
    assert timing.error is None
    assert [timing.requests[r].ttft_s for r in run.requests] == pytest.approx(list(metrics.ttfts(run)))
    assert timing.seconds == pytest.approx(run.step_end_s[-1])


def test_every_shipped_trace_gets_timed_or_stops_with_its_error():
    for path in corpus_paths()[:6]:
        trace = load_trace(path)
        policy = get_policy(trace.policy)
        timing = time_trace(trace, config_for(BudgetConfig.from_dict(trace.config), policy), policy, COST)
        assert set(timing.requests) <= {op.id for op in trace.ops if hasattr(op, "prompt_len")}
        assert timing.seconds >= 0 and (timing.error is None or "step" in timing.error)


def test_the_search_finds_a_gap_its_trace_reproduces():
    slow, fast = get_policy("vllm-static"), get_policy("vllm-adaptive")
    found, trace = search(CFG, slow, fast, COST, (0.7, 0.5), 30, 0)
    assert found.gap_s > 0 and found.workload is not None
    again = (metrics.ttfts(simulate(CFG, slow, found.workload, COST)).mean()
             - metrics.ttfts(simulate(CFG, fast, found.workload, COST)).mean())
    assert again == pytest.approx(found.gap_s)
    timing = time_trace(trace, CFG, slow, COST)
    assert timing.error is None and all(r.finish_s is not None for r in timing.requests.values())
    replayed = replay_on_model(trace)
    assert replayed.refusal is None and not replayed.errors and len(replayed.steps) == trace.num_steps
