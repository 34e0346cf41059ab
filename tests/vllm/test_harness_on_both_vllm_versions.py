"""The harness on both vLLM versions: the installed one (0.32) in a child process as a user runs
it, and 0.33.0 through ``--engine-path``. One replay and one short conformance run per version."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from vllm_support import skip_without_vllm

from tokenbudget.model.findings import FINDINGS

pytestmark = pytest.mark.vllm
skip_without_vllm()

CORPUS = Path(__file__).resolve().parents[2] / "corpus"
RAISES_AT = {"0.32": "scheduler.py:1372", "0.33": "scheduler.py:1579"}  # F1: the padded-admission assertion


def tokenbudget(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "tokenbudget.cli", *args], capture_output=True, text=True,
                          timeout=600, check=False)


@pytest.fixture(params=["0.32", "0.33"])
def version(request: pytest.FixtureRequest) -> tuple[str, list[str]]:
    """A vLLM version and the options that run it: the installed 0.32, or 0.33.0's folder."""
    if request.param == "0.32":
        return "0.32", []
    return "0.33", ["--engine-path", str(request.getfixturevalue("vllm033_path"))]


def test_each_version_grants_seed_000_with_dflash_what_it_should_and_f1_still_raises(version) -> None:
    name, options = version
    dflash = CORPUS / f"seed-000-vllm-adaptive-dflash-{name}.json"
    done = tokenbudget("replay", str(dflash), str(FINDINGS["F1"].trace_path), "--target", "vllm", *options, "--json")
    doc = json.loads(done.stdout)
    dflash_result, f1_result = doc["traces"]
    assert dflash_result["ok"] and dflash_result["engine_version"].startswith(f"vLLM {name}.")
    assert dflash_result["steps"][0]["num_scheduled_tokens"] == {"0": 10, "1": 2 if name == "0.32" else 10}
    assert any(RAISES_AT[name] in e and "AssertionError" in e for e in f1_result["errors"]), f1_result["errors"]


def test_conformance_compares_each_version_with_its_model(version, tmp_path: Path) -> None:
    name, options = version
    done = tokenbudget("conform", "--engine", "vllm", "--workloads", "3", "--seed", "1", "--corpus", str(tmp_path),
                       *options, "--json")
    doc = json.loads(done.stdout)
    assert (doc["release"].startswith(name + "."), doc["model_version"], doc["warning"]) == (True, name, None)
    assert doc["ok"] and done.returncode == 0, doc["divergences"]
