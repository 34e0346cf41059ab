"""The commands with TensorRT-LLM: ``conform --engine trtllm``, ``replay --target trtllm``; bad input is
one line and exit 2."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from tokenbudget.cli import main

pytestmark = pytest.mark.trtllm
CORPUS = Path(__file__).resolve().parents[2] / "tokenbudget" / "corpus"


def test_conform_under_max_requests_agrees(trtllm_folder: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["conform", "--engine", "trtllm", "--capacity-policy", "MAX_REQUESTS", "--workloads", "5",
                 "--engine-path", str(trtllm_folder), "--json"])
    report = json.loads(capsys.readouterr().out)
    assert code == 0 and report["ok"] and report["agreeing"] == 5 and report["engine"] == "trtllm"


def test_every_trtllm_corpus_trace_replays_on_the_real_scheduler(trtllm_folder: Path,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    traces = sorted(str(p) for p in [*CORPUS.glob("trtllm-*.json"), *CORPUS.glob("findings/t[123]-trtllm-*.json")])
    assert len(traces) == 8  # the findings T1-T3 expect what they break, on scheduler.py as on the model
    code = main(["replay", "--target", "trtllm", "--engine-path", str(trtllm_folder), *traces, "--json"])
    report = json.loads(capsys.readouterr().out)
    assert [t["ok"] for t in report["traces"]] == [True] * len(traces), report
    assert code == 1  # the traces of the code before #16101 and of T1-T3 violate, as they expect


@pytest.mark.parametrize("argv, says", [
    (["conform", "--engine", "trtllm", "--engine-path", "{tmp}"], "no TensorRT-LLM scheduler at"),
    (["conform", "--engine", "vllm", "--capacity-policy", "MAX_REQUESTS"], "is not a capacity scheduler of vllm"),
    (["replay", "--target", "trtllm", "--engine-path", "{tmp}", str(CORPUS / "trtllm-mtp-reserved.json")],
     "no TensorRT-LLM scheduler at"),
])
def test_bad_input_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str], argv: list[str], says: str) -> None:
    code = main([a.replace("{tmp}", str(tmp_path)) for a in argv])
    err = capsys.readouterr().err.strip()
    assert code == 2 and says in err and "\n" not in err and "Traceback" not in err
