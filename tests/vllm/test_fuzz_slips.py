"""``fuzz --target vllm --engine-path`` judges vLLM in lockstep with the model: a one-line slip
planted in vLLM 0.33.0's scheduler (tests/vllm/vllm_slips.py) is caught, and named by the rule
where vLLM parts from the model. bench/bench_vllm_slips.py measures every slip, timed."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from vllm_slips import BY_NAME, plant

pytestmark = pytest.mark.vllm

SLIP = "running-grant-ignores-draft-slots"
EXAMPLES = 60


def fuzz_json(engine: Path, corpus: Path) -> tuple[int, dict]:
    done = subprocess.run(
        [sys.executable, "-m", "tokenbudget.cli", "fuzz", "--target", "vllm", "--engine-path", str(engine),
         "--examples", str(EXAMPLES), "--seed", "0", "--workers", "1", "--corpus", str(corpus), "--json"],
        capture_output=True, text=True, timeout=900)
    assert done.stdout, done.stderr[-2000:]
    return done.returncode, json.loads(done.stdout)["policies"][0]


def test_fuzz_catches_a_slip_planted_in_vllms_scheduler(vllm033_path: Path, tmp_path: Path) -> None:
    engine = plant(vllm033_path, BY_NAME[SLIP], tmp_path / "engine")
    code, report = fuzz_json(engine, tmp_path / "corpus")
    own = {key: report["violations"][key] for key, verdict in report["judged"].items() if verdict != "known"}
    assert code == 1 and own, report["judged"]
    assert all("@" not in key or not key.split("@")[1].startswith("F") for key in own), own
    parted = [v["message"] for key, v in own.items() if key.startswith("conformance@")]
    assert all("request" in m and "vLLM grants" in m for m in parted), parted
    assert all(Path(v["trace"]).is_file() for v in own.values())
