"""FastDeploy targets in processes side by side (fuzz workers, tests running at once) each name
the scheduler's shared-memory block after their own process, so none unlinks another's."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Callable

import pytest

from tokenbudget.harness.fastdeploy.runtime import CHILD_ENV, PATH_ENV

BUILD_TWO = """
import json, os
from tokenbudget.harness.fastdeploy.engine import FastDeployEngine
from tokenbudget.model import BudgetConfig
cfg = BudgetConfig(max_num_batched_tokens=64, max_num_seqs=2, num_speculative_tokens=1, method="mtp", block_size=4,
                   max_model_len=32, num_kv_blocks=20, enable_prefix_caching=False)
names = [FastDeployEngine(cfg).rm.need_block_num_signal.shm.name.lstrip("/") for _ in range(2)]
print(json.dumps({"pid": os.getpid(), "names": names}))
"""


@pytest.mark.fastdeploy
def test_the_shared_memory_block_is_named_after_the_process(fastdeploy_at: Callable[[str], Path]) -> None:
    folder = fastdeploy_at("2a606e361")
    done = subprocess.run([sys.executable, "-c", BUILD_TWO], capture_output=True, text=True, timeout=600,
                          env={**os.environ, CHILD_ENV: str(folder), PATH_ENV: str(folder)})
    assert done.returncode == 0, done.stderr[-2000:]
    doc = json.loads(done.stdout.strip().splitlines()[-1])
    assert doc["names"] == [f"need_block_num_signal.{doc['pid']}"] * 2, doc
