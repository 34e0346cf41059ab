"""The target interface and the one op-application path shared by replay and the fuzzer."""
from __future__ import annotations


import pytest

from tokenbudget.spec.execution import Execution, TargetDead
from tokenbudget.model.target import ModelTarget
from tokenbudget.model import BudgetConfig, SchedulerLoop, get_policy, scheduler_for
from tokenbudget.model.replay import replay_on_model
from tokenbudget.spec.trace import AbortOp, AddOp, StepOp, Trace

CFG = BudgetConfig(max_num_batched_tokens=20, max_num_seqs=16, num_speculative_tokens=4, method="ngram",
                   parallel_drafting=True, block_size=4, num_kv_blocks=64, max_model_len=64)
OPS = (AddOp("0", 10, 3), AddOp("1", 10, 3), StepOp(), StepOp({"0": 2}), AbortOp("1"), StepOp(), StepOp())


def test_execution_records_what_the_scheduler_does() -> None:
    execution = Execution(ModelTarget(CFG, get_policy("vllm-adaptive")))
    for op in OPS:
        execution.apply(op)
    run = execution.run
    assert run.events == [("add", "0"), ("add", "1"), ("step", 0), ("step", 1), ("abort", "1"), ("step", 2),
                          ("step", 3)]
    assert run.added["0"].status == "waiting" and run.added["0"].num_prompt_tokens == 10
    sched = scheduler_for(CFG, get_policy("vllm-adaptive"))
    sched.add_request("0", 10, 3)
    sched.add_request("1", 10, 3)
    assert run.steps[0].num_scheduled_tokens == sched.schedule().num_scheduled_tokens == {"0": 10, "1": 4}
    assert run.outcomes[1].requests["0"].status == "finished"  # 1 + 2 accepted drafts reach max_tokens
    assert "1" in run.outcomes[1].requests and "1" not in run.outcomes[2].requests  # aborted: not scheduled


def test_replay_runs_the_same_path() -> None:
    trace = Trace("vllm-adaptive", CFG.to_dict(), OPS)
    execution = Execution(ModelTarget(CFG, get_policy("vllm-adaptive")))
    for op in OPS:
        execution.apply(op)
    replayed = replay_on_model(trace)
    assert [dict(s.num_scheduled_tokens) for s in replayed.steps] == \
           [r.num_scheduled_tokens for r in execution.run.steps]
    assert replayed.errors == ()


def test_a_refused_add_raises_value_error() -> None:
    execution = Execution(ModelTarget(CFG, get_policy("vllm-adaptive")))
    with pytest.raises(ValueError, match="prompt_len"):
        execution.apply(AddOp("long", 64, 1))


def test_an_exception_in_the_pass_becomes_the_record_error_and_ends_the_run(monkeypatch: pytest.MonkeyPatch) -> None:
    execution = Execution(ModelTarget(CFG, get_policy("vllm-adaptive")))
    execution.apply(AddOp("0", 10, 3))
    execution.apply(AddOp("1", 10, 3))

    def broken(self: SchedulerLoop) -> None:
        self.running.append(self.waiting.pop(0))
        self.waiting.reverse()
        raise RuntimeError("planted")

    monkeypatch.setattr(SchedulerLoop, "schedule", broken)
    record = execution.apply(StepOp())
    assert record is not None and record.error is not None and record.error.startswith("RuntimeError: planted (")
    assert record.num_scheduled_tokens == {} and record.waiting == ("0", "1") and record.running == ()  # as they were
    assert execution.crashed is record
    with pytest.raises(TargetDead, match="planted"):
        execution.apply(StepOp())


def test_an_exception_applying_the_output_keeps_the_pass(monkeypatch: pytest.MonkeyPatch) -> None:
    execution = Execution(ModelTarget(CFG, get_policy("vllm-adaptive")))
    execution.apply(AddOp("0", 10, 3))

    def broken(self: SchedulerLoop, record: object, accepted: object = None) -> None:
        raise AssertionError("planted")

    monkeypatch.setattr(SchedulerLoop, "update_from_output", broken)
    record = execution.apply(StepOp())
    assert record is not None and record.num_scheduled_tokens == {"0": 10}
    assert record.error is not None and "AssertionError: planted" in record.error
    assert execution.run.outcomes[-1].requests == {}


def test_replay_reports_a_target_error_and_stops(monkeypatch: pytest.MonkeyPatch) -> None:
    original = SchedulerLoop.schedule

    def second_step_fails(self: SchedulerLoop) -> object:
        if self.num_steps == 1:
            raise RuntimeError("planted")
        return original(self)

    monkeypatch.setattr(SchedulerLoop, "schedule", second_step_fails)
    result = replay_on_model(Trace("vllm-adaptive", CFG.to_dict(), OPS))
    assert len(result.steps) == 2 and not result.ok
    assert result.errors and result.errors[0].startswith("step 1: RuntimeError: planted")
