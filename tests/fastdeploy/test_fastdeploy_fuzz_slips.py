"""``fuzz --target fastdeploy --engine-path`` judges FastDeploy in lockstep with the model: a
one-line slip planted in its decode preallocation rule (tests/fastdeploy/fastdeploy_slips.py),
which no invariant of FastDeploy's own record breaks, is caught as a ``conformance`` violation
named by the rule where FastDeploy parts from the model. bench/bench_fastdeploy_slips.py
measures every slip, timed."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Callable

import pytest
from fastdeploy_slips import BY_NAME, plant

from tokenbudget.harness.differential import KV_IN_USE
from tokenbudget.harness.fastdeploy.runtime import CHILD_ENV

pytestmark = pytest.mark.fastdeploy

SLIP = "prealloc-threshold-strict"
EXAMPLES = 20  # seed 0 meets a decode at the slot threshold well within these


def test_fuzz_names_the_rule_of_a_slip_in_the_decode_preallocation(tmp_path: Path,
                                                                   fastdeploy_at: Callable[[str], Path]) -> None:
    engine = plant(fastdeploy_at("2a606e361"), BY_NAME[SLIP], tmp_path / "engine")
    done = subprocess.run(
        [sys.executable, "-m", "tokenbudget.cli", "fuzz", "--target", "fastdeploy", "--engine-path", str(engine),
         "--examples", str(EXAMPLES), "--seed", "0", "--workers", "1", "--database", "none", "--corpus",
         str(tmp_path / "corpus"), "--json"],
        capture_output=True, text=True, timeout=900, env={k: v for k, v in os.environ.items() if k != CHILD_ENV})
    assert done.stdout, done.stderr[-2000:]
    report = json.loads(done.stdout)["policies"][0]
    parted = {key: v for key, v in report["violations"].items() if key.startswith("conformance@")}
    assert done.returncode == 1 and parted, report["judged"]
    assert all(report["judged"][key] == "own" for key in parted)
    assert f"conformance@{KV_IN_USE}" in parted, sorted(parted)
    message = parted[f"conformance@{KV_IN_USE}"]["message"]
    assert message.startswith(f"conformance: step ") and f"{KV_IN_USE}: after the pass the model holds" in message
    assert "FastDeploy" in message and Path(parted[f"conformance@{KV_IN_USE}"]["trace"]).is_file()
