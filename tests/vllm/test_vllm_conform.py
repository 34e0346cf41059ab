"""Conformance of the model with the real vLLM 0.32 scheduler: lockstep runs, divergences, the command."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Callable

import pytest
from vllm_support import AGREEING_FINDINGS, RAISING_FINDINGS

from tokenbudget.cli import main
from tokenbudget.spec.corpus import corpus_paths
from tokenbudget.harness.conform import run_conformance
from tokenbudget.harness.vllm.workloads import workload
from tokenbudget.harness.vllm.conform import run_vllm_lockstep, vllm_engine
from tokenbudget.harness.vllm.known import explain
from tokenbudget.harness.vllm.engine import engine_version
from tokenbudget.harness.vllm.target import VllmTarget
from tokenbudget.model import methods
from tokenbudget.model.findings import Finding
from tokenbudget.model.replay import replay_on_model
from tokenbudget.spec.trace import Trace, load_trace

pytestmark = [pytest.mark.vllm, pytest.mark.usefixtures("vllm_imported")]

VLLM_CORPUS = [p for p in corpus_paths(findings=False) if load_trace(p).policy == "vllm-adaptive"]


def test_twenty_workloads_agree_or_diverge_only_as_documented(tmp_path: Path) -> None:
    report = run_conformance(seed=0, workloads=20, corpus=tmp_path, engine=vllm_engine())
    assert report.ok, [d.to_json() for d in report.unexplained]
    assert report.agreeing + len(report.divergences) == 20 and report.steps_agreeing > 100
    assert all(d.trace.exists() for d in report.divergences)
    assert {"chunked-prefill", "prefix-hit", "preemption", "drafts"} <= set(report.coverage)


@pytest.mark.parametrize("path", [*VLLM_CORPUS, *(f.trace_path for f in AGREEING_FINDINGS)], ids=lambda p: p.stem)
def test_model_and_vllm_agree_on_every_step_of_the_corpus(path: Path) -> None:
    result = run_vllm_lockstep(load_trace(path))
    assert result.agrees, (result.step, result.fields, result.model, result.engine)


@pytest.mark.parametrize("finding", RAISING_FINDINGS, ids=lambda f: f.id)
def test_a_finding_where_vllm_raises_is_a_known_divergence(finding: Finding) -> None:
    result = run_vllm_lockstep(load_trace(finding.trace_path))
    assert result.engine_raised and result.predicted_failure
    known = explain(result)
    assert known is not None and known.id == finding.id and "SPEC.md" in known.spec


def first_seed_whose_first_workload_shows(plant: Callable[[pytest.MonkeyPatch], None], version: str) -> int:
    """The first conformance seed whose workload 0 the planted bug changes the model's grants on
    (model replays only, no vLLM): the test does not depend on what the workload generator draws."""
    def grants(trace: Trace) -> list[dict[str, int]]:
        return [dict(step.num_scheduled_tokens) for step in replay_on_model(trace).steps]

    for seed in range(100):
        trace = workload(seed, 0, version)
        honest = grants(trace)
        with pytest.MonkeyPatch.context() as patch:
            plant(patch)
            if grants(trace) != honest:
                return seed
    raise AssertionError("no conformance seed below 100 has a first workload that shows the planted bug")


def test_a_planted_model_bug_is_an_unexplained_divergence_with_a_replayable_trace(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    honest = methods.drops_last_hit_block

    def plant(patch: pytest.MonkeyPatch) -> None:  # the drop of the last hit block, for the other methods
        patch.setattr(methods, "drops_last_hit_block", lambda table, method: method is not None
                      and not honest(table, method))

    seed = first_seed_whose_first_workload_shows(plant, engine_version().model_version)
    plant(monkeypatch)
    report = run_conformance(seed=seed, workloads=1, corpus=tmp_path, engine=vllm_engine())
    assert not report.ok and len(report.unexplained) == 1
    divergence = report.unexplained[0]
    trace = load_trace(divergence.trace)
    assert trace.expect and "Unexplained" in (trace.description or "")
    on_model = replay_on_model(trace)
    assert not on_model.ok and "expected" in on_model.problems[0]  # the model's side against vLLM's
    assert replay_on_model(trace, target_factory=VllmTarget).ok  # vLLM meets its own side
    assert len(trace.ops) <= 40  # shrunk


def test_conform_command(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["conform", "--engine", "vllm", "--workloads", "3", "--seed", "0", "--json",
                 "--corpus", str(tmp_path)]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["ok"] and doc["workloads"] == 3 and 0 <= doc["agreement"] <= 1 and doc["unexplained"] == 0
    assert main(["conform", "--workloads", "2"]) == 0
    assert "agreement: " in capsys.readouterr().out
    assert main(["conform", "--engine", "sglang", "--engine-path", str(tmp_path / "no-sglang")]) == 2
    assert capsys.readouterr().err.count("\n") == 1
