"""The findings table: each finding's matcher recognises its own corpus trace by its
mechanism and no other finding's, nor a clean run; the table names every finding trace."""
from __future__ import annotations

import pytest

from tokenbudget.verdict import Judge
from tokenbudget.model import BudgetConfig, get_policy
from tokenbudget.model.one_pass_loop import OnePassLoop
from tokenbudget.model.findings import FINDINGS, Finding, explaining_finding
from tokenbudget.model.replay import replay_on_model
from tokenbudget.spec.corpus import FINDINGS_DIR, corpus_paths
from tokenbudget.spec.records import RunRecord
from tokenbudget.spec.trace import Trace, ViolationExpectation, load_trace

CLEAN = [p for p in corpus_paths(findings=False) if p.name.startswith("vllm-adaptive")]


def model_run(trace: Trace) -> tuple[BudgetConfig, RunRecord]:
    result = replay_on_model(trace)
    assert result.run is not None
    return BudgetConfig.from_dict(trace.config), result.run


RUNS = {f.id: model_run(load_trace(f.trace_path)) for f in FINDINGS.values()}
CLEAN_RUNS = {p.stem: model_run(load_trace(p)) for p in CLEAN}


def test_the_table_names_every_finding_trace_once() -> None:
    assert sorted(f.trace for f in FINDINGS.values()) == sorted(p.name for p in FINDINGS_DIR.glob("*.json"))


@pytest.mark.parametrize("finding", FINDINGS.values(), ids=lambda f: f.id)
def test_the_trace_shows_the_findings_invariant(finding: Finding) -> None:
    trace = load_trace(finding.trace_path)
    assert ViolationExpectation(finding.invariant) in trace.expect
    assert finding.invariant in {v.invariant for v in replay_on_model(trace).violations}


@pytest.mark.parametrize("finding", FINDINGS.values(), ids=lambda f: f.id)
def test_the_matcher_accepts_its_own_trace_only(finding: Finding) -> None:
    assert finding.shows(*RUNS[finding.id])
    assert [other for other, run in RUNS.items() if other != finding.id and finding.shows(*run)] == []
    assert [name for name, run in CLEAN_RUNS.items() if finding.shows(*run)] == []


@pytest.mark.parametrize("finding", FINDINGS.values(), ids=lambda f: f.id)
def test_the_config_of_the_trace_opens_the_finding(finding: Finding) -> None:
    trace = load_trace(finding.trace_path)
    policy = get_policy(trace.policy)
    assert finding.opens(policy, BudgetConfig.from_dict(trace.config))
    if finding.engine == "vllm":  # the clean traces are vLLM's, on configs free of its findings
        assert not any(finding.opens(policy, cfg) for cfg, _ in CLEAN_RUNS.values() if cfg.scheduling_policy == "fcfs")


def test_a_violation_is_known_only_where_a_findings_mechanism_shows(monkeypatch: pytest.MonkeyPatch) -> None:
    f2 = load_trace(FINDINGS["F2"].trace_path)
    assert explaining_finding(f2, "progress") == FINDINGS["F2"]
    assert explaining_finding(f2, "progress", "fastdeploy-v0") is None  # no finding about that engine
    assert "F2" in (Judge("vllm-adaptive").known_why("progress", f2) or "")
    assert Judge("vllm-static").known_why("progress", f2) is not None
    monkeypatch.setattr(OnePassLoop, "_schedule_waiting", lambda self, step, threshold: None)
    stalled = load_trace(CLEAN[0])  # nothing is ever admitted: a progress violation no finding explains
    assert "progress" in {v.invariant for v in replay_on_model(stalled).violations}
    assert Judge("vllm-adaptive").known_why("progress", stalled) is None


def test_f4_needs_room_for_an_unpadded_admission() -> None:
    """F4 is the padding's gap: a config whose room min(T, B - d) is 0 (T = 0, which vLLM
    refuses) stalls every admission, padded or not, and is not F4's."""
    f4 = FINDINGS["F4"]
    cfg = BudgetConfig.from_dict(load_trace(f4.trace_path).config)
    policy = get_policy(load_trace(f4.trace_path).policy)

    class NoTokens(type(policy)):  # type: ignore[misc]
        def token_cap(self, p):  # type: ignore[no-untyped-def]
            return 0

    assert f4.opens(policy, cfg) and not f4.opens(NoTokens(), cfg)
