"""vLLM PR #46899's mechanism (closed unmerged; finding F9, SPEC.md §6): under async scheduling a
running request the pass leaves out keeps the -1 placeholder drafts of its last pass, and a later
pass schedules them as drafts. The PR's fix, planted into a copy of vLLM 0.33.0's scheduler, clears
them: F9's trace replays clean there. The mechanism planted back into that copy is caught by
``fuzz --target vllm``, async as vLLM deploys by default."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from planted_line import replace_line
from vllm_slips import plant

from tokenbudget.model.findings import FINDINGS

pytestmark = pytest.mark.vllm

ASYNC_SCHEDULER = "vllm/v1/core/sched/async_scheduler.py"
SHIPPED = "spec_decode_tokens = scheduler_output.scheduled_spec_decode_tokens"  # async_scheduler.py:26 (vLLM 0.33.0)
FIXED = (SHIPPED + "; [setattr(r, 'spec_token_ids', []) for r in self.running "
                   "if r.request_id not in scheduler_output.num_scheduled_tokens]")  # the left-out requests' cleared
EXAMPLES, SEED = 150, 1  # seed 1 schedules stale placeholders well within these examples


def tokenbudget(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "tokenbudget.cli", *args], capture_output=True, text=True,
                          timeout=900)


def with_the_fix(vllm033_path: Path, into: Path) -> Path:
    engine = plant(vllm033_path, None, into)
    replace_line(engine / ASYNC_SCHEDULER, SHIPPED, FIXED)
    return engine


def broken_on(engine: Path) -> set[str]:
    """The invariants F9's trace breaks on the vLLM in ``engine``."""
    done = tokenbudget("replay", str(FINDINGS["F9"].trace_path), "--target", "vllm", "--engine-path", str(engine),
                       "--json")
    return {v["invariant"] for v in json.loads(done.stdout)["traces"][0]["violations"]}


def test_the_fix_of_pr_46899_leaves_no_stale_placeholder(vllm033_path: Path, tmp_path: Path) -> None:
    assert "placeholder-fresh" in broken_on(vllm033_path)
    assert "placeholder-fresh" not in broken_on(with_the_fix(vllm033_path, tmp_path / "fixed"))


def test_fuzz_catches_the_mechanism_planted_back(vllm033_path: Path, tmp_path: Path) -> None:
    engine = with_the_fix(vllm033_path, tmp_path / "engine")
    replace_line(engine / ASYNC_SCHEDULER, FIXED, SHIPPED)
    done = tokenbudget("fuzz", "--target", "vllm", "--engine-path", str(engine), "--examples", str(EXAMPLES),
                       "--seed", str(SEED), "--workers", "1", "--corpus", str(tmp_path / "corpus"), "--json")
    report = json.loads(done.stdout)["policies"][0]
    assert report["judged"].get("placeholder-fresh@F9") == "known", report["judged"]
