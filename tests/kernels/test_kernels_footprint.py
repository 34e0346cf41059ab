"""Sizes the runner cannot hold are refused up front, in one line naming the limit and the knob."""
from __future__ import annotations

import json
import resource
from pathlib import Path

import pytest
import torch

from tokenbudget.cli import main
from tokenbudget.kernels.footprint import bytes_per_row, check_fits, needed_bytes
from tokenbudget.kernels.models import MODEL_SPECS
from tokenbudget.model import ConfigError
from tokenbudget.spec.corpus import corpus_paths
from tokenbudget.spec.records import StepLimits

SEED = next(str(p) for p in corpus_paths() if p.stem == "seed-000-vllm-adaptive")


def limits(rows: int, blocks: int = 64) -> StepLimits:
    return StepLimits(max_num_batched_tokens=rows, max_num_scheduled_tokens=rows, max_num_seqs=4,
                      num_speculative_tokens=0, draft_slots=0, lookahead=0, max_model_len=64, block_size=16,
                      num_kv_blocks=blocks)


def trace_with(tmp_path: Path, **config: int) -> str:
    doc = json.loads(Path(SEED).read_text())
    doc["config"].update(config)
    doc.pop("expect", None)
    path = tmp_path / "big.json"
    path.write_text(json.dumps(doc))
    return str(path)


def test_the_estimate_grows_with_b_and_the_whole_pool() -> None:
    spec = MODEL_SPECS["tiny"]
    assert needed_bytes(limits(1000), spec, whole_pool=False) == 1000 * bytes_per_row(spec)
    assert needed_bytes(limits(1000, 10**6), spec, whole_pool=True) > needed_bytes(limits(1000, 10**6), spec, False)


def test_a_b_past_free_memory_is_refused_before_torch_allocates() -> None:
    with pytest.raises(ConfigError, match="lower max_num_batched_tokens"):
        check_fits(limits(10**12), MODEL_SPECS["tiny"], torch.device("cpu"), whole_pool=False)
    check_fits(limits(8192), MODEL_SPECS["tiny"], torch.device("cpu"), whole_pool=False)


def test_replay_with_b_of_10_12_exits_2_in_one_line(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    code = main(["replay", trace_with(tmp_path, max_num_batched_tokens=10**12, max_num_seqs=8), "--target", "runner"])
    out, err = capsys.readouterr()
    assert code == 2 and out == "" and err.count("\n") == 1, err
    assert "max_num_batched_tokens" in err  # refused by the config bound, before any buffer is sized
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before < 2**20  # KiB: under 1 GiB more


def test_steps_past_the_bound_exit_2_before_any_op_is_built(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["replay", SEED, "--target", "runner", "--steps", str(10**9)])
    out, err = capsys.readouterr()
    assert code == 2 and out == "" and err.count("\n") == 1
    assert "--steps 1000000000 is more than the runner target runs (100000)" in err
