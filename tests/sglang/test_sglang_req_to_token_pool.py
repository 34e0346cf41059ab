"""The SGLang engine's req_to_token table is SGLang's own (shape, dtype, zeros, free rows, sizes)
but resident only where a run writes: SGLang's ``torch.zeros`` makes all max_num_seqs x
max_model_len positions resident (512 MiB at 1,024 x 128K), a fuzz worker's peaks while one lived."""
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
import json, sys
from pathlib import Path
from tokenbudget.harness.sglang.engine import SglangEngine
from tokenbudget.model import BudgetConfig

def resident():
    return next(int(line.split()[1]) * 1024 for line in open("/proc/self/status") if line.startswith("VmRSS:"))

folder = Path(sys.argv[1])
small = BudgetConfig(max_num_batched_tokens=64, max_num_seqs=4, block_size=4, num_kv_blocks=64, max_model_len=128)
engine = SglangEngine(small, folder)  # imports SGLang before the measurement
pool, row = engine.req_to_token_pool, engine.req_to_token_pool.max_context_len
own = engine.sg["ReqToTokenPool"](small.max_num_seqs, row, "cpu", False)
fields = ("size", "_alloc_size", "max_context_len", "device", "free_slots")
same = (all(getattr(pool, f) == getattr(own, f) for f in fields) and pool.req_to_token.dtype == own.req_to_token.dtype
        and engine.torch.equal(pool.req_to_token, own.req_to_token)
        and engine.torch.equal(pool.req_generation, own.req_generation))
large = BudgetConfig(max_num_batched_tokens=4096, max_num_seqs=512, block_size=16, num_kv_blocks=4096,
                     max_model_len=131072)
before = resident()
engine = SglangEngine(large, folder)
grown = resident() - before
table = engine.req_to_token_pool.req_to_token
print(json.dumps({"same": same, "grown": grown, "nominal": table.numel() * table.element_size(),
                  "shape": list(table.shape), "row": engine.req_to_token_pool.max_context_len,
                  "zeros": int(engine.torch.count_nonzero(table)) == 0}))
"""


@pytest.fixture(scope="module")
def pools(sglang_folder: Path) -> dict[str, object]:
    env = {**os.environ, PATH_ENV: str(sglang_folder)}
    done = subprocess.run([sys.executable, "-c", CHILD, str(sglang_folder)], capture_output=True, text=True,
                          env=env, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_the_table_is_sglangs_own_of_zeros(pools: dict[str, object]) -> None:
    assert pools["same"]
    assert pools["shape"] == [513, pools["row"]] and pools["zeros"]


def test_a_large_table_is_not_resident_until_written(pools: dict[str, object]) -> None:
    nominal = pools["nominal"]
    assert isinstance(nominal, int) and nominal >= 256 * 2**20
    assert pools["grown"] < nominal / 4, pools  # the whole table when zero-filled; a few pages when mapped lazily
