"""An SGLang engine's pools are freed when its target is closed, with no garbage collection: left
alone, SGLang's tree cache holds them in reference cycles until a full collection."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tokenbudget.harness.sglang.runtime import PATH_ENV

pytestmark = pytest.mark.sglang

CHILD = """
import gc, json, sys, weakref
from pathlib import Path
from tokenbudget.harness.sglang.target import SglangTarget
from tokenbudget.model import BudgetConfig
from tokenbudget.spec.target import release
from tokenbudget.spec.trace import AddOp
cfg = BudgetConfig(max_num_batched_tokens=64, max_num_seqs=4, num_speculative_tokens=2, method="eagle3",
                   block_size=4, num_kv_blocks=64, max_model_len=128, enable_prefix_caching=True)
gc.disable()
alive = {}
for closed in (False, True):
    target = SglangTarget(cfg, None, Path(sys.argv[1]))
    for n in range(3):
        target.add(AddOp(f"r{n}", 20, 4, prefix_group="g", prefix_len=8))
    for _ in range(4):
        target.step({})
    pool = weakref.ref(target.engine.req_to_token_pool.req_to_token)
    if closed:
        release(target)
    del target
    alive[str(closed)] = pool() is not None
print(json.dumps(alive))
"""


def test_a_closed_engine_frees_its_pools_without_a_collection(sglang_folder: Path) -> None:
    env = {**os.environ, PATH_ENV: str(sglang_folder)}
    done = subprocess.run([sys.executable, "-c", CHILD, str(sglang_folder)], capture_output=True, text=True,
                          env=env, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    alive = json.loads(done.stdout.strip().splitlines()[-1])
    assert alive == {"False": True, "True": False}  # kept by its cycles when not closed; freed when closed
