"""no-request-lost judged incrementally agrees with the whole-run predicate it replaced.

``whole_run_no_request_lost`` is that predicate (it visits every request ever added at
every step; a request the step's outcome reports aborted, the engine aborted); the incremental ``RequestAccounting`` must give the same breaches,
in the same order, on random hand-made runs, on random runs of the model and on every
corpus trace, whether fed the run at once or event by event.
"""
from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from factories import LIMITS, good_record
from tokenbudget.model.replay import replay_on_model
from tokenbudget.spec import RequestState, RunRecord, StepOutcome
from tokenbudget.spec import invariants as inv
from tokenbudget.spec.corpus import corpus_paths
from tokenbudget.spec.queue_ids import QueueIds
from tokenbudget.spec.trace import load_trace


def whole_run_no_request_lost(run):
    out = []
    status = {}
    computed = {}
    for event, arg in run.events:
        if event == "add":
            status[str(arg)] = "live"
        elif event == "abort":
            if status.get(str(arg)) == "live":
                status[str(arg)] = "aborted"
        else:
            index = int(arg)
            rec = run.steps[index]
            if index < len(run.outcomes):  # a live request the step's outcome reports aborted: the engine aborted it
                for rid, state in run.outcomes[index].requests.items():
                    if state.status == "aborted" and status.get(rid) == "live":
                        status[rid] = "aborted"
            queued = rec.running + rec.waiting
            seen = set()
            for rid in queued:
                if rid in seen:
                    out.append((rec.step, f"{rid} is queued twice"))
                seen.add(rid)
                if status.get(rid) != "live":
                    out.append((rec.step, f"{rid} is queued but {status.get(rid, 'was never added')}"))
            for rid, s in status.items():
                if s == "live" and rid not in seen:
                    out.append((rec.step, f"{rid} is in no queue"))
            if index >= len(run.outcomes):
                continue
            outcome = run.outcomes[index]
            for rid, state in outcome.requests.items():
                if state.num_output_tokens > state.max_tokens:
                    out.append((rec.step, f"{rid} has {state.num_output_tokens} outputs, max_tokens {state.max_tokens}"))
                expected = status.get(rid)
                if expected in ("finished", "aborted") and state.status != expected:
                    out.append((rec.step, f"{rid} was {expected}, now {state.status}"))
                if state.status in ("finished", "aborted"):
                    status[rid] = state.status
                elif rid in computed and state.num_computed_tokens < computed[rid] and rid not in outcome.preempted:
                    out.append((rec.step, f"{rid}'s computed tokens went back from {computed[rid]} to "
                                          f"{state.num_computed_tokens} without preemption"))
                computed[rid] = state.num_computed_tokens
    return out


def fed_event_by_event(run):
    """The accounting fed a growing copy of the run, one event at a time, as the fuzzer does."""
    accounting, partial, out = inv.RequestAccounting(), RunRecord(limits=run.limits, added=run.added), []
    for event in run.events:
        partial.events.append(event)
        if event[0] == "step":
            partial.steps.append(run.steps[event[1]])
            if event[1] < len(run.outcomes):
                partial.outcomes.append(run.outcomes[event[1]])
        out += accounting.feed(partial)
    return out


IDS = st.sampled_from("abcdef")
STATUSES = st.sampled_from(("waiting", "running", "finished", "aborted"))


@st.composite
def random_runs(draw):
    """Runs of arbitrary (also wrong) observations: ids queued twice, lost, revived, re-added."""
    run = RunRecord(limits=LIMITS)
    for _ in range(draw(st.integers(0, 14))):
        kind = draw(st.sampled_from(("add", "abort", "step", "step")))
        if kind != "step":
            run.events.append((kind, draw(IDS)))
            continue
        index = len(run.steps)
        running, waiting = draw(st.lists(IDS, max_size=4)), draw(st.lists(IDS, max_size=3))
        run.steps.append(good_record(step=index, running=tuple(running), waiting=tuple(waiting)))
        if len(run.outcomes) == index and draw(st.booleans()):  # outcomes: a prefix of the steps'
            touched = draw(st.dictionaries(IDS, st.tuples(STATUSES, st.integers(0, 6), st.integers(0, 4)), max_size=4))
            requests = {rid: RequestState(s, c, o, 3, 5) for rid, (s, c, o) in touched.items()}
            preempted = frozenset(draw(st.lists(st.sampled_from(sorted(touched) or ["a"]), max_size=2)))
            run.outcomes.append(StepOutcome(step=index, requests=requests, preempted=preempted))
        run.events.append(("step", index))
    return run


@st.composite
def random_window_runs(draw):
    """Runs whose waiting ids are QueueIds windows over shared logs, as the model records
    them, moved every way: sliding (head gone, tail added), jumping, onto a new log, or a
    plain tuple between; the log repeats ids, so windows can hold one twice."""
    run, log, start = RunRecord(limits=LIMITS), [], 0
    for _ in range(draw(st.integers(0, 16))):
        kind = draw(st.sampled_from(("add", "abort", "step", "step", "step")))
        if kind != "step":
            run.events.append((kind, draw(IDS)))
            continue
        move = draw(st.sampled_from(("slide", "slide", "slide", "jump", "new log", "tuple")))
        if move == "new log":
            log, start = draw(st.lists(IDS, max_size=4)), 0
        log += draw(st.lists(IDS, max_size=2))
        if move == "slide":
            start = draw(st.integers(start, len(log)))
        elif move == "jump":
            start = draw(st.integers(0, len(log)))
        stop = len(log) if move != "jump" else draw(st.integers(start, len(log)))
        waiting = tuple(log[start:stop]) if move == "tuple" else QueueIds(log, start, stop)
        index = len(run.steps)
        run.steps.append(good_record(step=index, running=tuple(draw(st.lists(IDS, max_size=3))), waiting=waiting))
        if draw(st.booleans()):
            touched = draw(st.dictionaries(IDS, st.tuples(STATUSES, st.integers(0, 6), st.integers(0, 4)), max_size=3))
            run.outcomes.append(StepOutcome(step=index, requests={rid: RequestState(s, c, o, 3, 5)
                                                                  for rid, (s, c, o) in touched.items()}))
        else:
            run.outcomes.append(StepOutcome(step=index, requests={}))
        run.events.append(("step", index))
    return run


@settings(max_examples=300, deadline=None)
@given(st.one_of(random_runs(), random_window_runs()))
def test_agrees_with_the_whole_run_predicate_on_random_runs(run):
    want = whole_run_no_request_lost(run)
    assert inv.no_request_lost.predicate(run) == want
    assert fed_event_by_event(run) == want


def model_runs():
    """Runs of the corpus traces on the model, and of random traces with aborts."""
    for path in corpus_paths():
        result = replay_on_model(load_trace(path))
        if result.run is not None:
            yield result.run
    from tokenbudget.model import BudgetConfig, get_policy
    from tokenbudget.model.target import ModelTarget
    from tokenbudget.spec.execution import Execution
    from tokenbudget.spec.trace import AbortOp, AddOp, StepOp

    for seed in range(20):
        rng = random.Random(seed)
        cfg = BudgetConfig(max_num_batched_tokens=64, max_num_seqs=4, block_size=4, num_kv_blocks=rng.randint(16, 40),
                           max_model_len=64, num_speculative_tokens=2, method="ngram")
        execution, live = Execution(ModelTarget(cfg, get_policy("vllm-adaptive"))), []
        for n in range(60):
            roll = rng.random()
            if roll < 0.3:
                execution.apply(AddOp(f"r{n}", rng.randint(1, 40), rng.randint(1, 12)))
                live.append(f"r{n}")
            elif roll < 0.35 and live:
                execution.apply(AbortOp(live.pop(rng.randrange(len(live)))))
            else:
                execution.apply(StepOp({rid: rng.randint(0, 2) for rid in live}))
        yield execution.run


@pytest.mark.parametrize("run", list(model_runs()))
def test_agrees_with_the_whole_run_predicate_on_model_runs(run):
    want = whole_run_no_request_lost(run)
    assert inv.no_request_lost.predicate(run) == want
    assert fed_event_by_event(run) == want


def test_a_lost_request_is_reported_at_every_step_in_add_order():
    steps = [good_record(step=i, running=("b",), waiting=()) for i in range(2)]
    run = RunRecord(limits=LIMITS, events=[("add", "c"), ("add", "b"), ("add", "a"), ("step", 0), ("step", 1)],
                    steps=steps)
    assert [m for _, m in inv.no_request_lost.predicate(run)] == ["c is in no queue", "a is in no queue"] * 2
