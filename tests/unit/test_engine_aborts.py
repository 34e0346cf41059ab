"""An abort the engine decides is an outcome of the step, never a lost request.

SGLang's ``retract_decode`` aborts the last decode when even it alone cannot fit
(schedule_batch.py:3508-3530 at v0.5.23); the model's SGLang loop does the same
(``SglangLoop._decode``). The aborted request leaves the running queue inside the pass,
so the step's record shows it in no queue; the step's outcome carries it as "aborted",
and ``no-request-lost`` takes that before it checks the queues.
"""
from __future__ import annotations

from factories import LIMITS, SGLANG_ABORTS_LAST, good_record

from tokenbudget.model import BudgetConfig, get_policy
from tokenbudget.model.target import ModelTarget
from tokenbudget.spec import RequestState, RunRecord, StepOutcome, check_run
from tokenbudget.spec import invariants as inv
from tokenbudget.spec.execution import Execution


def test_the_model_carries_sglangs_abort_of_the_last_decode_in_the_outcome():
    trace = SGLANG_ABORTS_LAST
    execution = Execution(ModelTarget(BudgetConfig.from_dict(trace.config), get_policy(trace.policy), validate=False))
    for op in trace.ops:
        execution.apply(op)
    run = execution.run
    aborted_at = next(i for i, out in enumerate(run.outcomes) if out.requests.get("r1", None)
                      and out.requests["r1"].status == "aborted")
    assert "r1" not in run.steps[aborted_at].running and not run.steps[aborted_at].num_scheduled_tokens
    violations = check_run(run)
    assert not [v for v in violations if v.invariant == "no-request-lost"], violations
    # r2's max_tokens 11 is clipped on arrival to max_req_len - 4 - 1 = 7 (max_req_len = 13 - 1, the pool):
    # once r1 leaves, it fits
    assert run.steps[aborted_at + 1].num_scheduled_tokens == {"r2": 4}


def state(status: str) -> RequestState:
    return RequestState(status, 4, 2, 8, 4)


def test_a_live_request_the_outcome_reports_aborted_is_not_lost():
    rec = good_record(running=("0",), waiting=())
    out = StepOutcome(0, {"0": state("running"), "1": state("aborted")})
    run = RunRecord(LIMITS, events=[("add", "0"), ("add", "1"), ("step", 0)], steps=[rec], outcomes=[out])
    assert inv.no_request_lost.predicate(run) == []
    later = good_record(step=1, running=("0", "1"))  # an aborted request queued again is still a breach
    run.steps.append(later)
    run.outcomes.append(StepOutcome(1, {"0": state("running")}))
    run.events.append(("step", 1))
    assert [m for _, m in inv.no_request_lost.predicate(run)] == ["1 is queued but aborted"]


def test_a_request_the_outcome_reports_aborted_but_still_queued_is_a_breach():
    rec = good_record(running=("0", "1"))
    out = StepOutcome(0, {"0": state("running"), "1": state("aborted")})
    run = RunRecord(LIMITS, events=[("add", "0"), ("add", "1"), ("step", 0)], steps=[rec], outcomes=[out])
    assert [m for _, m in inv.no_request_lost.predicate(run)] == ["1 is queued but aborted"]
