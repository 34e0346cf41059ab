"""``fuzz --target sglang``: SGLang 0.5.23's scheduler code in lockstep with the model
(``tokenbudget/harness/sglang/differential.py``), in child processes. On conformance's own workloads the two
never part and SGLang's records break no invariant; a config without speculation is refused."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tokenbudget.harness.sglang.runtime import CHILD_ENV, PATH_ENV

pytestmark = pytest.mark.sglang

CHILD = """
import json, sys
from tokenbudget.harness.sglang.differential import SglangDifferentialTarget
from tokenbudget.harness.sglang.workloads import POLICY, workload
from tokenbudget.model import BudgetConfig, ConfigError, get_policy
from tokenbudget.spec import check_run
from tokenbudget.spec.execution import Execution
out = {"parted": [], "violations": [], "steps": 0}
for index in range(int(sys.argv[1])):
    trace = workload(0, index, POLICY)
    target = SglangDifferentialTarget(BudgetConfig.from_dict(trace.config), get_policy(POLICY))
    run = Execution(target)
    for op in trace.ops:
        run.apply(op)
    out["steps"] += len(run.run.steps)
    out["parted"] += [v.message for v in target.judged]
    out["violations"] += [f"{index}: {v}" for v in check_run(run.run)]
try:
    SglangDifferentialTarget(BudgetConfig(num_speculative_tokens=0), get_policy(POLICY))
except ConfigError as exc:
    out["refused"] = str(exc)
print(json.dumps(out))
"""


def test_on_conformance_workloads_the_sides_never_part_and_sglang_breaks_nothing(sglang_folder: Path) -> None:
    env = {**os.environ, PATH_ENV: str(sglang_folder), CHILD_ENV: str(sglang_folder)}
    done = subprocess.run([sys.executable, "-c", CHILD, "40"], capture_output=True, text=True, env=env, timeout=600,
                          check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert out["steps"] > 200 and out["parted"] == [] and out["violations"] == [], out
    assert "num_speculative_tokens >= 1" in out["refused"]


def test_fuzz_target_sglang_runs_in_lockstep_from_the_command_line(sglang_folder: Path, tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, "-m", "tokenbudget.cli", "fuzz", "--target", "sglang", "--engine-path",
                           str(sglang_folder), "--examples", "20", "--workers", "1", "--database", "none",
                           "--corpus", str(tmp_path), "--json"],
                          capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode in (0, 1), done.stderr[-3000:]
    doc = json.loads(done.stdout)
    assert doc["target"] == "sglang" and [r["policy"] for r in doc["policies"]] == ["sglang-0.5.23"], doc
    assert doc["policies"][0]["target"] == "sglang" and doc["policies"][0]["steps"] > 0
