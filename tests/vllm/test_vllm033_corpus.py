"""The corpus traces written for vLLM 0.33 replayed on vLLM 0.33.0 itself (through ``--engine-path``,
in one child process): vLLM meets each trace's expectations, as the model does
(tests/regression). The 0.32 ones run on the installed vLLM in test_vllm_target.py."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest
from vllm_support import skip_without_vllm

from tokenbudget.spec.corpus import corpus_paths
from tokenbudget.spec.trace import load_trace

pytestmark = pytest.mark.vllm
skip_without_vllm()

VLLM033_CORPUS = [p for p in corpus_paths(findings=False)
                  if (t := load_trace(p)).policy == "vllm-adaptive" and t.config.get("engine_version") == "0.33"]


def test_the_corpus_holds_the_0_33_stop_cut_trace() -> None:
    assert "vllm-adaptive-0.33-stop-cuts-computed" in {p.stem for p in VLLM033_CORPUS}


def test_every_vllm_adaptive_corpus_trace_for_0_33_meets_its_expectations_on_vllm_0_33(vllm033_path) -> None:
    done = subprocess.run([sys.executable, "-m", "tokenbudget.cli", "replay", *map(str, VLLM033_CORPUS),
                           "--target", "vllm", "--engine-path", str(vllm033_path), "--json"],
                          capture_output=True, text=True, timeout=600, check=False)
    results = json.loads(done.stdout)["traces"]
    assert [r["engine_version"].startswith("vLLM 0.33.") for r in results] == [True] * len(VLLM033_CORPUS)
    failed = {p.stem: r for p, r in zip(VLLM033_CORPUS, results) if not r["ok"]}
    assert not failed and done.returncode == 0, failed
