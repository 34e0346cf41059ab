"""Traces on which ``fuzz --target sglang`` once parted SGLang 0.5.23 from the model, run again
in lockstep (``SglangDifferentialTarget``, in a child process): the sides agree on every step,
the KV blocks in use after each pass included."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tokenbudget.harness.sglang.runtime import CHILD_ENV, PATH_ENV
from tokenbudget.model.findings import FINDINGS
from tokenbudget.spec.trace import AddOp, StepOp, Trace, dump_trace, load_trace

pytestmark = pytest.mark.sglang

CHILD = """
import json, sys
from tokenbudget.harness.sglang.differential import SglangDifferentialTarget
from tokenbudget.model import BudgetConfig, get_policy
from tokenbudget.spec.execution import Execution
from tokenbudget.spec.trace import parse_trace
out = []
for doc in json.loads(sys.stdin.read()):
    trace = parse_trace(doc)
    target = SglangDifferentialTarget(BudgetConfig.from_dict(trace.config), get_policy(trace.policy))
    run = Execution(target)
    for op in trace.ops:
        run.apply(op)
    out.append({"parted": [v.message for v in target.judged],
                "grants": [rec.num_scheduled_tokens for rec in run.run.steps],
                "preempted": [list(rec.preempted) for rec in run.run.steps],
                "kv": [rec.kv_blocks_in_use for rec in run.run.steps],
                "model_kv": [rec.kv_blocks_in_use for rec in target.reference_run.steps]})
print(json.dumps(out))
"""


def _one_token(ids: range, max_tokens: dict[int, int] | None = None) -> list[AddOp]:
    return [AddOp(str(i), 1, (max_tokens or {}).get(i, 1)) for i in ids]


# fuzz --target sglang --seed 0: after step 16's retraction of 14, SGLang's ratio is 1.0 (11's max_new is its
# 46 clipped on arrival to max_req_len - 1 - 1 = 15); the model once divided by 46. With 11's max_new 15 (it was
# clipped to 17 before the arrival clip was modelled) both sides re-admit 14 at step 17.
RATIO_AFTER_RETRACT = Trace(
    policy="sglang-0.5.23", source="fuzz --target sglang --seed 0: the ratio after a retraction",
    config={"max_num_batched_tokens": 60, "max_num_seqs": 10, "num_speculative_tokens": 5, "method": "eagle3",
            "block_size": 1, "num_kv_blocks": 36, "max_model_len": 18},
    ops=[*_one_token(range(7), {6: 13}), StepOp({}), StepOp({}),
         *_one_token(range(7, 16), {11: 46, 13: 2, 14: 6}), StepOp({}), AddOp("16", 1, 1), *[StepOp({})] * 15])


@pytest.fixture(scope="module")
def runs(sglang_folder: Path) -> list[dict[str, Any]]:
    docs = json.dumps([dump_trace(RATIO_AFTER_RETRACT), dump_trace(load_trace(FINDINGS["F8"].trace_path))])
    done = subprocess.run([sys.executable, "-c", CHILD], input=docs, capture_output=True, text=True, timeout=600,
                          env={**os.environ, PATH_ENV: str(sglang_folder), CHILD_ENV: str(sglang_folder)}, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def test_after_a_retraction_the_ratio_counts_max_new_clipped_on_arrival(runs: list[dict[str, Any]]) -> None:
    run = runs[0]
    assert run["parted"] == [], run["parted"]
    assert run["preempted"][16] == ["14"] and run["grants"][17] == {"14": 2}


def test_the_blocks_in_use_are_read_after_the_pass_before_its_output(runs: list[dict[str, Any]]) -> None:
    """Step 13 is 6's last decode: its 24 blocks are counted before its release caches 12 of them."""
    run = runs[0]
    assert run["kv"] == run["model_kv"] and run["kv"][13] == 24 and run["kv"][14] == 17


def test_f8_sglangs_row_write_passes_the_row_where_the_model_reports_model_len(runs: list[dict[str, Any]]) -> None:
    """Page 1, k = 8: the last decode's reservation (KV 12 + 2 * 9) is one past the req_to_token row
    SGLang sizes (16 + 4 + 9); the engine's write fails there and the model's model-len explains it."""
    (judged,) = runs[1]["parted"]
    assert "F8" in judged and "req_to_token row of 29 positions written to 30" in judged
