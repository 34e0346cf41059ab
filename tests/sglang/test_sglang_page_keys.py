"""The SGLang target's shared-page keys (``SglangEngine._tokens_to_page_end``) cost one page of
tokens each, not the whole prefix up to the page: two requests sharing a prefix of thousands of
one-token pages hold a few MB while they decode, where whole-prefix keys held that prefix's
square (hundreds of MB in a fuzz example, the workers' growth). Keys stay content keys: one per
shared page, all different, equal for every record while the page is unchanged."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tokenbudget.harness.sglang.runtime import PATH_ENV

pytestmark = pytest.mark.sglang

PREFIX = 3000  # shared prompt tokens, one a page
CONFIG = {"max_num_batched_tokens": 8192, "max_num_seqs": 2, "num_speculative_tokens": 1, "method": "eagle3",
          "parallel_drafting": False, "block_size": 1, "num_kv_blocks": 8000, "max_model_len": 3200,
          "enable_prefix_caching": True}
CHILD = """
import json, sys, tracemalloc
from pathlib import Path
from tokenbudget.harness.sglang.target import SglangTarget
from tokenbudget.model import BudgetConfig
from tokenbudget.spec.execution import Execution
from tokenbudget.spec.trace import AddOp, StepOp
folder, config, prefix = Path(sys.argv[1]), json.loads(sys.argv[2]), int(sys.argv[3])
execution = Execution(SglangTarget(BudgetConfig.from_dict(config), None, folder))
for op in [AddOp("a", prefix + 8, 40, prefix_group="g", prefix_len=prefix), StepOp({})]:
    execution.apply(op)
tracemalloc.start()
for op in [AddOp("b", prefix + 8, 40, prefix_group="g", prefix_len=prefix)] + [StepOp({}) for _ in range(6)]:
    execution.apply(op)
peak = tracemalloc.get_traced_memory()[1]
steps = [r for r in execution.run.steps if r.block_keys]
shared = [sorted(set(r.block_tables["a"]) & set(r.block_tables["b"])) for r in steps]
print(json.dumps({"peak": peak, "steps": len(steps), "shared_is_keyed": all(sorted(r.block_keys) == s for r, s in zip(steps, shared)),
                  "keys": len(steps[-1].block_keys) if steps else 0,
                  "distinct": len({k for k in steps[-1].block_keys.values()}) if steps else 0,
                  "same_each_step": all(r.block_keys == steps[-1].block_keys for r in steps[1:])}))
"""


@pytest.fixture(scope="module")
def run(sglang_folder: Path) -> dict[str, object]:
    proc = subprocess.run([sys.executable, "-c", CHILD, str(sglang_folder), json.dumps(CONFIG), str(PREFIX)],
                          capture_output=True, text=True, timeout=600, env={**os.environ, PATH_ENV: str(sglang_folder)})
    assert proc.returncode == 0, proc.stderr[-2000:]
    return json.loads(proc.stdout.splitlines()[-1])  # type: ignore[no-any-return]


def test_the_shared_prefix_pages_are_keyed_one_key_each(run: dict[str, object]) -> None:
    assert run["steps"] >= 5 and run["shared_is_keyed"]
    assert run["keys"] >= PREFIX - 1 and run["distinct"] == run["keys"]
    assert run["same_each_step"]


def test_the_keys_cost_a_page_each_not_the_prefix(run: dict[str, object]) -> None:
    assert run["peak"] < 40 * 2**20  # whole-prefix keys: PREFIX**2 / 2 token ids, 4.5M, over 150 MB
