"""The #16101 mechanism on TensorRT-LLM's own scheduler.py: without the draft-token stamp a one-model
generation request is charged 1 (scheduler.py:1009) while the forward runs 1 + k rows, so the
step breaks ``input-rows-cap``; with the stamp the same trace holds."""
from __future__ import annotations

from pathlib import Path

import pytest

from tokenbudget.harness.trtllm.target import TrtllmTarget
from tokenbudget.model import BudgetConfig, get_policy
from tokenbudget.spec.execution import Execution
from tokenbudget.spec.invariants import check_step
from tokenbudget.spec.trace import load_trace

pytestmark = pytest.mark.trtllm
CORPUS = Path(__file__).resolve().parents[2] / "tokenbudget" / "corpus"
MINIMAL = CORPUS / "trtllm-one-model-unreserved-minimal.json"
REPORT = CORPUS / "trtllm-one-model-unreserved-rows-overflow.json"


def _violations(trace_path: Path, policy: str, folder: Path) -> set[str]:
    trace = load_trace(trace_path)
    execution = Execution(TrtllmTarget(BudgetConfig.from_dict(trace.config), get_policy(policy), folder))
    for op in trace.ops:
        execution.apply(op)
    return {v.invariant for record in execution.run.steps for v in check_step(record)}


@pytest.mark.parametrize("trace", [MINIMAL, REPORT], ids=["minimal", "report"])
def test_without_the_stamp_the_real_scheduler_overflows_the_rows(trtllm_folder: Path, trace: Path) -> None:
    assert "input-rows-cap" in _violations(trace, "trtllm-one-model-unreserved", trtllm_folder)


@pytest.mark.parametrize("trace", [MINIMAL, REPORT], ids=["minimal", "report"])
def test_with_the_stamp_the_same_trace_holds(trtllm_folder: Path, trace: Path) -> None:
    assert _violations(trace, "trtllm", trtllm_folder) == set()
