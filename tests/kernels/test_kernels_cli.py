"""``tokenbudget replay --target runner``: faults exit 1 by name, usage errors exit 2 in one line."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from tokenbudget.cli import main
from tokenbudget.spec.corpus import corpus_paths

CORPUS = {p.stem: str(p) for p in corpus_paths()}
FD_OVERFLOW = CORPUS["fastdeploy-reserve-rows-overflow"]
SEED = CORPUS["seed-000-vllm-adaptive"]


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def assert_usage_error(code: int, out: str, err: str, words: str) -> None:
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and err.startswith("tokenbudget: error: "), err
    assert words in err


def test_the_fastdeploy_counterexample_exits_1_with_input_rows_overflow(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, "replay", FD_OVERFLOW, "--target", "runner", "--device", "cpu")
    assert code == 1 and err == ""
    assert "runner verdict: InputRowsOverflow: step 2: needs 528 input rows" in out
    assert "B = 520" in out and "Traceback" not in out
    assert "the runner raised InputRowsOverflow" in out and "the scheduler raised InputRowsOverflow" not in out


def test_json_is_the_only_stdout(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, "replay", FD_OVERFLOW, SEED, "--target", "runner", "--json")
    doc = json.loads(out)
    assert code == 1 and err == "" and doc["ok"] is False and doc["target"] == "runner"
    fd, seed = doc["traces"]
    assert fd["runner"]["fault"].startswith("InputRowsOverflow: step 2")
    assert [s["total_rows"] for s in fd["runner"]["steps"]] == [32, 20, 528]
    assert seed["runner"]["fault"] is None and seed["ok"] and not seed["errors"]
    assert seed["runner"]["steps"][0]["rows"] == {"0": 13, "1": 7}


def test_a_200_step_live_run_is_clean_and_draws_its_plot(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    plot = tmp_path / "rows.png"
    code, out, err = run(capsys, "replay", SEED, "--target", "runner", "--mode", "live", "--steps", "200",
                         "--plot", str(plot))
    assert code == 0 and err == "", out
    assert "runner verdict: ok" in out and "verdict: ok" in out
    assert plot.read_bytes().startswith(b"\x89PNG")
    code, out, err = run(capsys, "replay", SEED, "--target", "runner", "--plot", str(plot))
    assert_usage_error(code, out, err, "exists; --plot never overwrites")


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the message shown without CUDA")
def test_cuda_without_a_gpu_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, "replay", SEED, "--target", "runner", "--device", "cuda")
    assert_usage_error(code, out, err, "--device cuda: no CUDA device is available")
    assert "or use --device cpu" in err


@pytest.mark.parametrize(("argv", "words"), [
    (["--plot", "x.png"], "--plot applies only to --target runner; drop it or add --target runner"),
    (["--steps", "3", "--acceptance", "rejection"],
     "--acceptance, --steps apply only to --target runner; drop them or add --target runner"),
    (["--target", "runner", "--memory-cap"], "add --device cuda"),
    ([FD_OVERFLOW, "--target", "runner", "--plot", "x.png"], "--plot draws one trace, got 2"),
    (["--target", "runner", "--plot", "/no/such/folder/x.png"], "no folder /no/such/folder"),
    (["--target", "runner", "--steps", "-1"], "expected a whole number"),
])
def test_bad_runner_options_are_usage_errors(capsys: pytest.CaptureFixture[str], argv: list[str], words: str) -> None:
    assert_usage_error(*run(capsys, "replay", SEED, *argv), words)


def test_the_cli_starts_without_torch() -> None:
    probe = "import sys, tokenbudget.cli; sys.exit('torch' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", probe]).returncode == 0
