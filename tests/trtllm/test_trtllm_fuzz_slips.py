"""``fuzz --target trtllm --engine-path`` judges TensorRT-LLM's scheduler.py in lockstep with the model
and by the spec: a slip planted in it (tests/trtllm/trtllm_slips.py) shows a failure the unpatched
file does not show on the same seed and examples. bench/bench_trtllm_slips.py times every slip."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from trtllm_slips import BY_NAME, plant

pytestmark = pytest.mark.trtllm

EXAMPLES = 100
SEED = 1  # its examples reach a chunked context beside generation requests with drafts


def fuzz_identities(engine: Path, corpus: Path) -> dict[str, str]:
    """The failures ``fuzz --target trtllm`` finds on ``engine``: identity -> verdict."""
    done = subprocess.run(
        [sys.executable, "-m", "tokenbudget.cli", "fuzz", "--target", "trtllm", "--engine-path", str(engine),
         "--examples", str(EXAMPLES), "--seed", str(SEED), "--workers", "1", "--database", "none",
         "--corpus", str(corpus), "--json"],
        capture_output=True, text=True, timeout=900)
    assert done.stdout, done.stderr[-2000:]
    report = json.loads(done.stdout)["policies"][0]
    assert report["examples"] == EXAMPLES
    return dict(report["judged"])


def test_fuzz_catches_generation_drafts_left_uncharged(trtllm_folder: Path, tmp_path: Path) -> None:
    """Charged its beam width only (scheduler.py:1009), a generation request leaves the context
    chunk its drafts' rows: the forward runs more than max_num_tokens."""
    slipped = plant(trtllm_folder, BY_NAME["generation-drafts-uncharged"], tmp_path / "engine")
    found = fuzz_identities(slipped, tmp_path / "slipped")
    unpatched = fuzz_identities(trtllm_folder, tmp_path / "unpatched")
    assert "input-rows-cap" in found and found["input-rows-cap"] == "own", found
    assert "input-rows-cap" not in unpatched, unpatched
