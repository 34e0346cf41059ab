"""SGLang 0.5.23's own ``retract_decode`` aborting the last decode (schedule_batch.py:3508-3530),
driven by the harness in a child process: the abort is the step's outcome, not a lost
request; the harness's fingerprints show the stall that follows as a fixpoint, as the model's do."""
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

# r0 (17 + 2) is admitted; its first decode's reservation (2A = 8 past 17) outgrows the 21-token
# pool and, the last request, it is aborted. r1 (16 + 29) never fits the pool: the steps after repeat.
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
ops = [AddOp("r0", 17, 2), AddOp("r1", 16, 29)] + [StepOp({}) for _ in range(5)]
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
def test_the_stall_after_it_is_a_fixpoint_at_step_2(runs: dict[str, Any], target: str) -> None:
    run = runs[target]
    assert run["fingerprinted"]
    fixpoints = [v for v in run["violations"] if "changed nothing" in v[2]]
    assert [v[1] for v in fixpoints] == [2] and "r1" in fixpoints[0][2]
