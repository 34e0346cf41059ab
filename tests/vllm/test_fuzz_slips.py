"""``fuzz --target vllm --engine-path`` judges vLLM in lockstep with the model: a one-line slip
planted in vLLM 0.33.0's or 0.34.0's scheduler (tests/vllm/vllm_slips.py) is caught, and named by
the rule where vLLM parts from the model. bench/bench_vllm_slips.py measures every slip, timed."""
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
REFUND_EXAMPLES, REFUND_SEED = 400, 1  # this seed meets the refund given back twice in a priority wave within these
RELEASES = pytest.mark.parametrize("folder", ["vllm033_path", "vllm034_path"])  # conftest's fixture of each


def fuzz_json(engine: Path, corpus: Path, examples: int = EXAMPLES, seed: int = 0) -> tuple[int, dict]:
    done = subprocess.run(
        [sys.executable, "-m", "tokenbudget.cli", "fuzz", "--target", "vllm", "--engine-path", str(engine),
         "--examples", str(examples), "--seed", str(seed), "--workers", "1", "--corpus", str(corpus), "--json"],
        capture_output=True, text=True, timeout=900)
    assert done.stdout, done.stderr[-2000:]
    return done.returncode, json.loads(done.stdout)["policies"][0]


@RELEASES
def test_fuzz_catches_a_slip_planted_in_vllms_scheduler(folder: str, request: pytest.FixtureRequest,
                                                         tmp_path: Path) -> None:
    engine = plant(request.getfixturevalue(folder), BY_NAME[SLIP], tmp_path / "engine")
    code, report = fuzz_json(engine, tmp_path / "corpus")
    own = {key: report["violations"][key] for key, verdict in report["judged"].items() if verdict != "known"}
    assert code == 1 and own, report["judged"]
    assert all("@" not in key or not key.split("@")[1].startswith("F") for key in own), own
    parted = [v["message"] for key, v in own.items() if key.startswith("conformance@")]
    assert all("request" in m and "vLLM grants" in m for m in parted), parted
    assert all(Path(v["trace"]).is_file() for v in own.values())


@RELEASES
def test_fuzz_catches_a_same_step_refund_given_back_twice(folder: str, request: pytest.FixtureRequest,
                                                          tmp_path: Path) -> None:
    """The refund of a preempted request's grant, applied twice, shows only where requests behind
    the preempting one then ask for more than the single refund left: the priority wave's pass
    (``fuzz.request_shapes.priority_waves``). The fuzz names the parting after that refund."""
    engine = plant(request.getfixturevalue(folder), BY_NAME["refund-twice"], tmp_path / "engine")
    code, report = fuzz_json(engine, tmp_path / "corpus", REFUND_EXAMPLES, REFUND_SEED)
    own = {key: report["violations"][key] for key, verdict in report["judged"].items() if verdict != "known"}
    assert code == 1 and own, report["judged"]
    after_refund = [v["message"] for key, v in own.items()
                    if key.startswith("conformance@") and "after the same-step refund" in v["message"]]
    assert after_refund, own
