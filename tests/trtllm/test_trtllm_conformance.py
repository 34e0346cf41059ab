"""``conform --engine trtllm``: the model's ``trtllm`` against TensorRT-LLM's scheduler.py under each
capacity policy; every workload agrees step for step or up to a crash the model foretold (T1, T2:
SPEC.md §9), none unexplained."""
from __future__ import annotations

from pathlib import Path

import pytest

from tokenbudget.harness.conform import run_conformance
from tokenbudget.harness.trtllm.conform import trtllm_engine
from tokenbudget.harness.trtllm.engine import CAPACITY_POLICIES
from tokenbudget.model.trtllm.deployments import MAX_REQUESTS

pytestmark = pytest.mark.trtllm
WORKLOADS = 40


@pytest.mark.parametrize("capacity", CAPACITY_POLICIES)
def test_every_divergence_is_a_finding(trtllm_folder: Path, tmp_path: Path, capacity: str) -> None:
    report = run_conformance(0, WORKLOADS, tmp_path, engine=trtllm_engine(trtllm_folder, capacity))
    assert report.ok, [d.to_json() for d in report.unexplained]
    assert report.agreement == 1.0 and report.agreeing >= WORKLOADS * 3 // 4, report.to_json()
    for d in report.divergences:  # each a crash on both sides, at the same step
        assert d.predicted and d.trace.is_file() and d.explanation is not None
        assert d.result.model is not None and (d.result.model.error or "").startswith("OutOfBlocks")
    if capacity == MAX_REQUESTS:  # no KV gate in the scheduler, a pool that holds every seat's sequence
        assert report.agreeing == WORKLOADS


def test_the_workloads_run_each_capacity_policy_on_both_sides(trtllm_folder: Path) -> None:
    seen = {}
    for capacity in CAPACITY_POLICIES:
        engine = trtllm_engine(trtllm_folder, capacity)
        trace = engine.workload(0, 0)
        seen[capacity] = trace.config["engine_version"]
        assert engine.lockstep(trace).config.engine_version == trace.config["engine_version"]
    assert len(set(seen.values())) == len(CAPACITY_POLICIES)
