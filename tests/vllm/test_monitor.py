"""The runtime monitor and the pytest plugin on the real vLLM scheduler: a clean run breaks
nothing, a request dropped from the queues is caught, and the exported finding tests
(tokenbudget/corpus/vllm_tests) are flagged by the plugin on exactly the versions where they are bugs."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tokenbudget import monitor
from tokenbudget.harness.vllm.folder import child_env
from tokenbudget.harness.vllm.engine import VllmEngine
from tokenbudget.harness.vllm.export import VLLM_TESTS_DIR, exported_test_name
from tokenbudget.model import BudgetConfig
from tokenbudget.model.findings import FINDINGS, Finding

pytestmark = pytest.mark.vllm
CONFIG = BudgetConfig(max_num_batched_tokens=32, max_num_seqs=4, num_speculative_tokens=2, method="ngram", block_size=4,
                      num_kv_blocks=64, max_model_len=64, enable_prefix_caching=True)


def run_engine(engine: VllmEngine, steps: int) -> None:
    for rid, prompt in (("a", 10), ("b", 6), ("c", 13)):
        engine.add(rid, prompt, 5, prefix_group="sys", prefix_len=4)
    for _ in range(steps):
        engine.step({"a": 1, "b": 2})


def test_a_clean_run_breaks_nothing_and_each_step_is_judged(vllm_imported: None) -> None:
    engine = VllmEngine(CONFIG)
    watched = monitor.attach(engine.scheduler)
    run_engine(engine, 12)
    assert watched.violations == []
    assert watched.stats.steps == 12 and watched.stats.outputs_applied == 12


def test_a_request_dropped_from_the_queues_is_lost(vllm_imported: None) -> None:
    engine = VllmEngine(CONFIG)
    watched = monitor.attach(engine.scheduler)
    run_engine(engine, 1)
    engine.scheduler.running.pop()  # a slip: the tail of the running queue vanishes
    engine.step({})
    lost = [v for v in watched.violations if v.violation.invariant == "no-request-lost"]
    assert lost and "in no queue" in lost[0].violation.message and lost[0].record is not None


def test_a_preemption_outside_a_pass_lets_computed_tokens_go_back(vllm_imported: None) -> None:
    engine = VllmEngine(CONFIG.replace(max_num_batched_tokens=12))  # a recompute takes several steps
    watched = monitor.attach(engine.scheduler)
    run_engine(engine, 4)
    running = len(engine.scheduler.running)
    assert running and engine.scheduler.reset_prefix_cache(reset_running_requests=True)  # preempts them all
    for _ in range(6):
        engine.step({})
    assert watched.stats.preempted_outside_a_pass == running and watched.violations == []


def test_watch_attaches_to_schedulers_built_in_the_block_only(vllm_imported: None) -> None:
    with monitor.watch() as watched:
        inside = VllmEngine(CONFIG)
    outside = VllmEngine(CONFIG)
    run_engine(inside, 3)
    run_engine(outside, 3)
    assert watched.stats.schedulers == 1 and watched.stats.steps == 3 and watched.violations == []


def run_findings_under_plugin(tmp_path: Path, env: dict[str, str]) -> dict[str, set[str]]:
    """The exported finding tests under ``--tokenbudget=report``: each test's invariants broken."""
    out = tmp_path / "judged.jsonl"
    subprocess.run([sys.executable, "-m", "pytest", "-q", "-n", "0", "-p", "no:cacheprovider", "--tokenbudget=report",
                    "--tokenbudget-out", str(out), str(VLLM_TESTS_DIR)], env=env, cwd=tmp_path,
                   capture_output=True, text=True, timeout=600)
    flagged: dict[str, set[str]] = {}
    for line in out.read_text().splitlines():
        doc = json.loads(line)
        flagged[doc["test"].rsplit("::", 1)[-1]] = {v["invariant"] for v in doc["violations"] + doc["known"]}
    return flagged


def expected(version: str) -> dict[str, set[str]]:
    """Each vLLM finding's exported test, and the invariant the plugin must flag in it on ``version``."""
    def flagged(f: Finding) -> set[str]:
        return ({"model-error"} if f.engine_raises else {f.invariant}) if version in f.affects_versions else set()

    return {exported_test_name(f.trace_path).removesuffix(".py"): flagged(f)
            for f in FINDINGS.values() if f.engine == "vllm"}


def test_the_plugin_flags_the_findings_on_vllm_0_32(vllm_imported: None, tmp_path: Path) -> None:
    assert run_findings_under_plugin(tmp_path, dict(os.environ)) == expected("0.32")


def test_the_plugin_flags_the_findings_on_vllm_0_33(vllm033_path: Path, tmp_path: Path) -> None:
    assert run_findings_under_plugin(tmp_path, child_env(vllm033_path)) == expected("0.33")


def test_a_test_failing_for_its_own_reason_shows_its_step_record(vllm_imported: None, tmp_path: Path) -> None:
    """F1's exported test on vLLM 0.32 fails for vLLM's own reason (an assertion in its
    scheduler, which the monitor judges a model-error): under strict the failure stays
    vLLM's, and the test's report shows the violation with its step record."""
    (tmp_path / "test_own.py").write_text((VLLM_TESTS_DIR / "test_f1_vllm_adaptive_padded_threshold.py").read_text())
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-n", "0", "-p", "no:cacheprovider",
                           "--tokenbudget=strict", "test_own.py"], cwd=tmp_path, capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 1, done.stdout + done.stderr
    report, summary = done.stdout.split("short test summary")
    section = report.split("Captured tokenbudget call")[1]
    assert "model-error: step 1: the scheduler raised AssertionError" in section and '  step: {"step": 1' in section
    assert "FAILED test_own.py::test_f1_vllm_adaptive_padded_threshold - AssertionError" in summary
    assert "tests failed by strict: 0" in report  # the failure is the test's own
