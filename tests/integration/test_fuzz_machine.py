"""The fuzzing state machine: what it generates, how it judges, and that its traces replay."""
from __future__ import annotations

import math
import re
from dataclasses import replace
from pathlib import Path
from typing import Mapping

import pytest
from hypothesis import Phase, settings
from hypothesis.database import InMemoryExampleDatabase
from hypothesis import strategies as st
from hypothesis.stateful import precondition, rule

from tokenbudget.fuzz.config_strategies import configs
from tokenbudget.fuzz.failures import FAILURE_CLASSES
from tokenbudget.fuzz import machine
from tokenbudget.fuzz.machine import FuzzStats, machine_class
from tokenbudget.fuzz.session import fuzz, run_machine
from tokenbudget.spec.shrink import shrink
from tokenbudget.model.target import ModelTarget
from tokenbudget.model import BudgetConfig, BudgetPolicy, get_policy
from tokenbudget.model.findings import FINDINGS
from tokenbudget.model.replay import replay_on_model
from tokenbudget.spec.records import StepOutcome, StepRecord
from tokenbudget.spec.trace import StepOp, Trace, ViolationExpectation, load_trace

NO_SHRINK = (Phase.explicit, Phase.generate)
FD_V0 = get_policy("fastdeploy-v0")
SMALL_FD = configs(FD_V0, scales=("small",))
# two requests decoding 1 + k = 2 rows each overrun B = 2: an example soon fails, and each one
# Hypothesis replays while it shrinks drains in a few steps
TINY_FD = st.just(BudgetConfig(max_num_batched_tokens=2, max_num_seqs=2, num_speculative_tokens=1, method="mtp",
                               block_size=1, num_kv_blocks=16, max_model_len=16))  # FastDeploy asks >= 16


def failure_of(policy: str, strategy: st.SearchStrategy[BudgetConfig] | None = None, examples: int = 300,
               phases: tuple[Phase, ...] = NO_SHRINK, **attributes: object):
    """The first failure of a seeded run of the machine (None if there was none) and its class."""
    cls = machine_class(policy, get_policy(policy), config_strategy=strategy)
    cls.stats = FuzzStats()
    for name, value in attributes.items():
        setattr(cls, name, value)
    return run_machine(cls, examples, 0, phases, parent=settings(derandomize=True)), cls


def test_a_counterexample_replays_with_its_violation(tmp_path: Path) -> None:
    found, _ = failure_of("fastdeploy-v0")
    assert found is not None and found.kind == "input-rows-cap"
    trace = found.trace
    assert trace.expect[0] == ViolationExpectation("input-rows-cap") and trace.policy == "fastdeploy-v0"
    assert found.program[0].startswith("state = ") and found.program[-1] == "state.teardown()"
    result = replay_on_model(trace)
    assert result.ok and "input-rows-cap" in {v.invariant for v in result.violations}
    last_step = sum(1 for op in trace.ops if type(op).__name__ == "StepOp") - 1
    assert any(v.step == last_step for v in result.violations), "the trace ends at the violating step"


def test_the_trace_holds_exactly_the_ops_applied() -> None:
    seen: list[StepRecord] = []

    class Recording(ModelTarget):
        def step(self, accepted: Mapping[str, int]) -> tuple[StepRecord, StepOutcome]:
            record, outcome = super().step(accepted)
            seen.append(record)
            return record, outcome

    def recording(cfg: BudgetConfig, policy: BudgetPolicy) -> ModelTarget:
        seen.clear()
        return Recording(cfg, policy)

    found, _ = failure_of("fastdeploy-v0", target_factory=recording)
    assert found is not None
    replayed = replay_on_model(found.trace)
    assert [dict(s.num_scheduled_tokens) for s in replayed.steps] == [r.num_scheduled_tokens for r in seen]


def test_a_counterexample_is_shrunk_and_reduced_to_a_short_trace() -> None:
    report = fuzz("fastdeploy-v0", examples=300, seed=0, config_strategy=TINY_FD)
    found = report.counterexamples[0]
    assert found.kind == "input-rows-cap" and len(found.trace.ops) <= 8, found.trace.ops
    assert len(found.program) > 2, "Hypothesis printed the program it shrank"
    result = replay_on_model(found.trace)
    assert result.ok and found.message == found.trace.description
    assert found.message in {str(v) for v in result.violations}

    def still_violated(candidate: Trace) -> bool:
        return "input-rows-cap" in {v.invariant for v in replay_on_model(candidate).violations}

    assert shrink(found.trace, still_violated) == found.trace, "no request, step or abort can be left out"


def test_a_known_kind_ends_its_run_quietly() -> None:
    found, cls = failure_of("fastdeploy-v0", examples=30, known=frozenset({"input-rows-cap"}))
    assert found is None or found.kind != "input-rows-cap"
    assert "input-rows-cap" in cls.stats.first_failure  # seen, not raised


class ClosedTarget(ModelTarget):
    """The model, noting whether the machine released it."""

    closed = False

    def close(self) -> None:
        self.closed = True


@pytest.mark.parametrize("policy", ["vllm-adaptive", "fastdeploy-v0"])  # examples that pass; examples that fail
def test_every_target_an_example_built_is_released_when_it_ends(policy: str) -> None:
    built: list[ClosedTarget] = []

    def factory(cfg: BudgetConfig, pol: BudgetPolicy) -> ClosedTarget:
        built.append(ClosedTarget(cfg, pol))
        return built[-1]

    cls = machine_class(policy, get_policy(policy), target_factory=factory)
    cls.stats = FuzzStats()
    run_machine(cls, 20, 0, NO_SHRINK, parent=settings(derandomize=True))
    assert cls.stats.examples >= 1 and len(built) >= cls.stats.examples
    assert [t.closed for t in built] == [True] * len(built)


def _without_model_fields(record: StepRecord) -> StepRecord:
    return replace(record, ledger=None, initial_token_budget=None, initial_input_budget=None,
                   progress_possible=None, unserved_demand=None)


class EngineLike(ModelTarget):
    """The model, exposing only what a real engine's records hold: no ledger, no progress_possible."""

    def step(self, accepted: Mapping[str, int]) -> tuple[StepRecord, StepOutcome]:
        record, outcome = super().step(accepted)
        return _without_model_fields(record), outcome


def test_an_engine_target_without_a_ledger_runs_in_the_same_machine() -> None:
    strategy = configs(get_policy("fastdeploy-decode-count"), scales=("small",))
    found, cls = failure_of("fastdeploy-decode-count", strategy, examples=20, target_factory=EngineLike)
    assert found is None, found
    assert cls.stats.steps > 100


def test_an_exception_in_the_target_is_a_model_error() -> None:
    class Crashing(ModelTarget):
        def step(self, accepted: Mapping[str, int]) -> tuple[StepRecord, StepOutcome]:
            record, outcome = super().step(accepted)
            return replace(record, error="RuntimeError: boom (engine.py:1)"), outcome

    found, _ = failure_of("fastdeploy-decode-count", target_factory=Crashing, examples=5)
    assert found is not None and found.kind == "model-error" and found.error == "RuntimeError: boom (engine.py:1)"
    assert found.trace.description == "model-error: step 0: the scheduler raised RuntimeError: boom (engine.py:1)"
    assert found.trace.expect == (ViolationExpectation("model-error"),)


class Stalled(EngineLike):
    """Schedules nothing, ever, and (like a real engine) does not say whether it could have."""

    def step(self, accepted: Mapping[str, int]) -> tuple[StepRecord, StepOutcome]:
        sched = self.scheduler
        waiting = tuple(r.request_id for r in sched.waiting)
        record = StepRecord(sched.num_steps, self.limits, {}, {}, {}, {}, {}, frozenset(), frozenset(), (),
                            (), waiting, 0, {}, {})
        sched.num_steps += 1
        return record, StepOutcome(record.step, {})


def test_a_drain_that_never_finishes_is_a_progress_violation_at_its_bound() -> None:
    found, _ = failure_of("fastdeploy-decode-count", SMALL_FD, examples=5, target_factory=Stalled)
    assert found is not None and found.kind == "progress"
    drained = re.search(r"after a (\d+)-step drain \(bound (\d+)\)", str(found))
    assert drained and drained[1] == drained[2], "the run ends at the first step the spec judges"
    assert sum(isinstance(op, StepOp) for op in found.trace.ops) == int(drained[1])


def test_a_drain_that_looks_stuck_ends_quietly_once_progress_is_known(monkeypatch: pytest.MonkeyPatch) -> None:
    found, cls = failure_of("fastdeploy-decode-count", SMALL_FD, examples=5, target_factory=Stalled,
                            known=frozenset({"progress"}))
    monkeypatch.setattr(machine, "STUCK_REPEATS", math.inf)
    unstopped_found, unstopped = failure_of("fastdeploy-decode-count", SMALL_FD, examples=5, target_factory=Stalled,
                                            known=frozenset({"progress"}))
    assert found is None and unstopped_found is None
    assert cls.stats.examples == unstopped.stats.examples
    assert cls.stats.steps < unstopped.stats.steps / 2, "each stalled drain ended at its 16th idle step, not its bound"


def test_scores_reach_a_database_only_when_the_target_phase_reads_them() -> None:
    """Hypothesis keeps the Pareto front of target() scores in the example database; that
    costs a quarter of a run, and only its target phase uses them."""
    for phases, pareto in ((NO_SHRINK, False), ((*NO_SHRINK, Phase.target), True)):
        database = InMemoryExampleDatabase()
        fuzz("fastdeploy-decode-count", examples=20, phases=phases, database=database, config_strategy=SMALL_FD)
        assert any(key.endswith(b".pareto") for key in database.data) == pareto, phases


def test_what_the_drain_finds_in_an_example_hypothesis_cut_short_is_reported() -> None:
    """Hypothesis drops an exception raised after it ran out of data for an example; the
    drain's failure is still the run's, unshrunk and without a program, and ends the run."""
    policy = get_policy("fastdeploy-decode-count")
    base = machine_class("fastdeploy-decode-count", policy, Stalled, config_strategy=SMALL_FD)

    class OutOfData(base):  # type: ignore[misc, valid-type]
        @precondition(lambda self: bool(self.live))
        @rule(blob=st.binary(min_size=100_000))
        def draw_past_the_data(self, blob: bytes) -> None:
            raise AssertionError("never drawn: Hypothesis runs out of data first")

    OutOfData.stats = FuzzStats()
    found = run_machine(OutOfData, 50, 0, NO_SHRINK, parent=settings(derandomize=True))
    assert found is not None and found.kind == "progress" and "drain" in str(found), found
    assert found.program == [] and OutOfData.stats.cut_short is found and OutOfData.stats.stopped
    assert OutOfData.stats.examples == OutOfData.stats.raised_at  # no example ran after it


def test_a_session_saves_each_counterexample_without_overwriting(tmp_path: Path) -> None:
    first = fuzz("fastdeploy-v0", examples=10, seed=3, corpus=tmp_path, config_strategy=SMALL_FD, phases=NO_SHRINK)
    again = fuzz("fastdeploy-v0", examples=10, seed=3, corpus=tmp_path, config_strategy=SMALL_FD, phases=NO_SHRINK)
    trace_path, program_path = map(Path, first.counterexamples[0].paths)
    assert trace_path.name == "fastdeploy-v0-input-rows-cap-seed3.json"
    assert Path(again.counterexamples[0].paths[0]).name == "fastdeploy-v0-input-rows-cap-seed3-2.json"
    assert load_trace(trace_path) == first.counterexamples[0].trace
    program = program_path.read_text()
    assert "tokenbudget replay fastdeploy-v0-input-rows-cap-seed3.json" in program and "state.start(" in program
    assert first.to_json()["violations"]["input-rows-cap"]["trace"] == str(trace_path)


def test_a_session_finds_more_than_one_kind() -> None:
    # one counterexample per identity: a kind may come more than once, by different findings
    report = fuzz("vllm-static", examples=100, seed=0, phases=NO_SHRINK)
    keys = [c.key for c in report.counterexamples]
    assert len(keys) == len(set(keys)) and len({c.kind for c in report.counterexamples}) >= 2, keys
    for found in report.counterexamples:
        assert replay_on_model(found.trace).ok


def test_on_the_model_a_violation_carries_the_finding_its_matcher_names() -> None:
    # F2, F3 and F4 all break progress: a session tells them apart by the finding's matcher
    cfg = BudgetConfig.from_dict(load_trace(FINDINGS["F4"].trace_path).config)
    report = fuzz("vllm-adaptive", examples=60, seed=0, phases=NO_SHRINK, config_strategy=st.just(cfg),
                  stop_when_found=frozenset({"progress@F4"}))
    assert "progress@F4" in {c.key for c in report.counterexamples}, [c.key for c in report.counterexamples]
