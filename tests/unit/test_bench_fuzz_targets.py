"""bench/bench_fuzz.py's targets come from the tables: every finding on the built-ins it
affects, every recorded violation the fuzzer judges; a finding counts only under the identity
its matcher gives a violation, never by its invariant alone."""
from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

from tokenbudget.check import JUDGED
from tokenbudget.fuzz.failures import identity, is_known
from tokenbudget.fuzz.session import Counterexample
from tokenbudget.model import BudgetConfig, builtin_policies, get_policy
from tokenbudget.model.fastdeploy.commits import FASTDEPLOY_COMMITS
from tokenbudget.model.findings import FINDINGS, shown_finding
from tokenbudget.model.replay import replay_on_model
from tokenbudget.spec.trace import Trace, load_trace
from tokenbudget.verdict import recorded_violations

BENCH = Path(__file__).resolve().parents[2] / "bench" / "bench_fuzz.py"


@pytest.fixture(scope="module")
def bench() -> ModuleType:
    spec = importlib.util.spec_from_file_location("bench_fuzz", BENCH)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def test_every_finding_and_every_recorded_violation_is_a_target(bench: ModuleType) -> None:
    targets = bench.targets()
    assert len(set(targets)) == len(targets)
    for f in FINDINGS.values():
        on = {t.policy for t in targets if t.finding == f.id}
        if set(f.affects_versions) <= set(FASTDEPLOY_COMMITS):  # only a commit's block rules have it: no model fuzz
            assert not on
            continue
        assert on, f"{f.id} is no target"
        for policy in on:
            assert t_identity(targets, policy, f.id) == f"{f.invariant}@{f.id}"
            assert get_policy(policy).engine == f.engine and get_policy(policy).version in f.affects_versions
    assert {t.policy for t in targets if t.finding == "F3"} == {"vllm-adaptive"}  # F3: vLLM 0.32, the one it names
    recorded = {(p, kind) for p in builtin_policies() for kind in recorded_violations(p) if kind in JUDGED}
    assert recorded and recorded == {(t.policy, t.identity) for t in targets if t.finding is None}


def t_identity(targets: list, policy: str, finding: str) -> str:
    return next(t.identity for t in targets if t.policy == policy and t.finding == finding)


def counterexample(kind: str, key: str) -> Counterexample:
    return Counterexample(kind, kind, Trace("vllm-adaptive", {}, ()), (), 0, 1.0, 1, 0,
                          identity="" if key == kind else key)


@pytest.mark.parametrize("finding", sorted(FINDINGS))
def test_a_finding_is_found_only_under_the_identity_its_matcher_gives(bench: ModuleType, finding: str) -> None:
    f = FINDINGS[finding]
    trace = load_trace(f.trace_path)
    policy = get_policy(trace.policy)
    cfg = BudgetConfig.from_dict(trace.config)
    run = replay_on_model(trace).run
    assert run is not None
    violation = next(v for v in replay_on_model(trace).violations if v.invariant == f.invariant)
    matched = shown_finding(policy.engine, f.invariant, cfg, run, policy.engine_version(cfg))
    seen = identity(violation, None if matched is None else matched.id)
    assert seen == f"{f.invariant}@{finding}"
    target = next((t for t in bench.targets() if t.finding == finding), None)
    if target is None:  # a finding of a commit's block rules alone: the bench fuzzes no commit
        assert set(f.affects_versions) <= set(FASTDEPLOY_COMMITS)
        return
    assert seen == target.identity
    assert target.found_by(counterexample(f.invariant, seen))
    assert not target.found_by(counterexample(f.invariant, f.invariant))  # the invariant alone is not the finding
    others = [o for o in FINDINGS.values() if o.invariant == f.invariant and o.id != finding]
    for other in others:
        assert not target.found_by(counterexample(f.invariant, f"{f.invariant}@{other.id}"))
        assert is_known(f"{f.invariant}@{other.id}", target.known())  # they do not stop its search
    assert not is_known(target.identity, target.known()) and f.invariant not in target.known()


def test_a_recorded_violation_is_found_by_its_invariant_whatever_the_mechanism(bench: ModuleType) -> None:
    target = next(t for t in bench.targets() if t.finding is None and t.invariant == "kv-capacity")
    assert target.found_by(counterexample("kv-capacity", "kv-capacity@F6"))
    assert target.found_by(counterexample("kv-capacity", "kv-capacity"))
    assert not target.found_by(counterexample("progress", "progress"))
