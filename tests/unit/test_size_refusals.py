"""A large valid pool costs what the run uses on the model; the vllm target, whose block
pool makes every block up front, refuses one past its bound before building vLLM."""
from __future__ import annotations

import json
import tracemalloc
from pathlib import Path

import pytest

from tokenbudget.cli import main
from tokenbudget.harness.vllm.target import MAX_VLLM_KV_BLOCKS, VllmTarget
from tokenbudget.model import BudgetConfig, ConfigError, get_policy
from tokenbudget.model.replay import replay_on_model
from tokenbudget.spec.corpus import corpus_paths
from tokenbudget.spec.trace import load_trace

SINGLE = next(str(p) for p in corpus_paths() if p.stem == "vllm-adaptive-single-request")


def with_pool(tmp_path: Path, blocks: int) -> str:
    doc = json.loads(Path(SINGLE).read_text())
    doc["config"]["num_kv_blocks"] = blocks
    doc.pop("expect", None)
    path = tmp_path / f"pool-{blocks}.json"
    path.write_text(json.dumps(doc))
    return str(path)


def test_a_pool_of_10_9_blocks_replays_on_the_model_in_little_memory(tmp_path: Path) -> None:
    trace = load_trace(with_pool(tmp_path, 10**9))
    tracemalloc.start()
    try:
        result = replay_on_model(trace)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert result.ok and result.steps
    assert peak < 16 * 2**20, f"{peak} bytes"


def test_the_vllm_target_refuses_a_pool_past_its_bound_before_building_vllm() -> None:
    cfg = BudgetConfig(num_kv_blocks=MAX_VLLM_KV_BLOCKS + 1)
    with pytest.raises(ConfigError, match=f"more than the vllm target builds \\({MAX_VLLM_KV_BLOCKS}\\)"):
        VllmTarget(cfg, get_policy("vllm-adaptive"))


def test_replay_on_vllm_with_10_8_blocks_exits_2_in_one_line(capsys: pytest.CaptureFixture[str],
                                                              tmp_path: Path) -> None:
    code = main(["replay", with_pool(tmp_path, 10**8), "--target", "vllm"])
    out, err = capsys.readouterr()
    banner, error = err.splitlines()  # the engine's release and model, then the one error line
    assert code == 2 and out == "" and banner.startswith("tokenbudget: vLLM ") and "error:" not in banner
    assert "num_kv_blocks 100000000" in error and "lower num_kv_blocks" in error
