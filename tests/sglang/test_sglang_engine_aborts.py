"""SGLang 0.5.23's own ``retract_decode`` aborting the last decode (schedule_batch.py:3508-3530),
driven by the harness in a child process: the abort is the step's outcome, not a lost
request, on SGLang's code as on the model. The request behind it is admitted and aborted in turn:
SGLang's arrival clip of max_new_tokens (scheduler.py:2709-2740) keeps every request admissible
on an empty pool, so nothing stalls."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tokenbudget.harness.sglang.runtime import PATH_ENV

pytestmark = pytest.mark.sglang

# r0 (14 + 2) is admitted; its first decode's reservation (2A = 8 past 14) outgrows the 21-token
# pool and, the last request, it is aborted. r1 (13 + 29, clipped on arrival to 13 + 6) is admitted
# next; its second decode's reservation (8 past 14) outgrows the pool, and it is aborted too.
CONFIG = {"max_num_batched_tokens": 32, "max_num_seqs": 1, "num_speculative_tokens": 3, "method": "eagle3",
          "parallel_drafting": False, "block_size": 1, "num_kv_blocks": 21, "max_model_len": 32,
          "enable_prefix_caching": False}
CHILD = """
import json, sys
from pathlib import Path
from tokenbudget.harness.sglang.target import SglangTarget
from tokenbudget.model import BudgetConfig, get_policy
from tokenbudget.model.target import ModelTarget
from tokenbudget.spec import check_run
from tokenbudget.spec.execution import Execution
from tokenbudget.spec.trace import AddOp, StepOp
folder, config = Path(sys.argv[1]), json.loads(sys.argv[2])
cfg = BudgetConfig.from_dict(config)
ops = [AddOp("r0", 14, 2), AddOp("r1", 13, 29)] + [StepOp({}) for _ in range(5)]
out = {}
for name, target in (("sglang", SglangTarget(cfg, None, folder)),
                     ("model", ModelTarget(cfg, get_policy("sglang-0.5.23"), validate=False))):
    execution = Execution(target)
    for op in ops:
        execution.apply(op)
    run = execution.run
    out[name] = {"statuses": [{rid: s.status for rid, s in o.requests.items()} for o in run.outcomes],
                 "running": [list(r.running) for r in run.steps],
                 "fingerprinted": all(r.fingerprint is not None for r in run.steps),
                 "violations": [[v.invariant, v.step, v.message] for v in check_run(run)]}
print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def runs(sglang_folder: Path) -> dict[str, Any]:
    proc = subprocess.run([sys.executable, "-c", CHILD, str(sglang_folder), json.dumps(CONFIG)], capture_output=True,
                          text=True, timeout=600, env={**os.environ, PATH_ENV: str(sglang_folder)})
    assert proc.returncode == 0, proc.stderr[-2000:]
    return json.loads(proc.stdout.splitlines()[-1])  # type: ignore[no-any-return]


@pytest.mark.parametrize("target", ["sglang", "model"])
def test_the_abort_of_the_last_decode_is_an_outcome(runs: dict[str, Any], target: str) -> None:
    run = runs[target]
    assert run["statuses"][1].get("r0") == "aborted" and "r0" not in run["running"][1]
    assert not [v for v in run["violations"] if v[0] == "no-request-lost"], run["violations"]


@pytest.mark.parametrize("target", ["sglang", "model"])
def test_the_request_behind_runs_and_is_aborted_in_turn(runs: dict[str, Any], target: str) -> None:
    run = runs[target]
    assert run["fingerprinted"] and run["running"][2:4] == [["r1"], ["r1"]]
    assert run["statuses"][4].get("r1") == "aborted" and run["violations"] == []


def test_sglang_and_the_model_agree_on_every_outcome(runs: dict[str, Any]) -> None:
    assert runs["sglang"]["statuses"] == runs["model"]["statuses"]
