"""Runs that start from given traces: which traces a policy can start from, what the starts
draw (the first trace whole first), and a session whose first example replays the start."""
from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from hypothesis import Phase, find, given, settings
from hypothesis import strategies as st

import tokenbudget
from tokenbudget.fuzz.session import fuzz
from tokenbudget.fuzz.trace_starts import next_index, starts_name, trace_starts, usable_starts
from tokenbudget.model import get_policy
from tokenbudget.spec.trace import AddOp, StepOp, load_trace

FINDINGS = Path(tokenbudget.__file__).parent / "corpus" / "findings"
F2 = load_trace(FINDINGS / "f2-vllm-adaptive-unchunked-draft-slots.json")
F4 = load_trace(FINDINGS / "f4-vllm-adaptive-padded-admission-over-budget.json")


def test_a_policy_starts_only_from_traces_with_ops_on_configs_it_accepts() -> None:
    policy = get_policy("vllm-adaptive")
    refused = replace(F2, config={**F2.config, "max_num_seqs": 0})
    unknown_key = replace(F2, config={**F2.config, "no_such_knob": 1})
    assert usable_starts(policy, [F2, replace(F2, ops=(), expect=()), refused, unknown_key, F4]) == [F2, F4]


def test_the_simplest_start_is_the_first_trace_whole() -> None:
    simplest = find(trace_starts([F2, F4]), lambda _: True)
    assert simplest.ops == F2.ops and simplest.config.to_dict() == {**simplest.config.to_dict(), **F2.config}


@settings(max_examples=50, database=None)
@given(data=st.data())
def test_every_start_is_a_prefix_of_a_trace_keeping_its_first_op(data: st.DataObject) -> None:
    start = data.draw(trace_starts([F2, F4]))
    assert any(start.ops == t.ops[:len(start.ops)] for t in (F2, F4)) and len(start.ops) >= 1


def test_requests_added_after_a_start_take_ids_it_did_not() -> None:
    ops = (AddOp("3", 10, 4), StepOp(), AddOp("req", 5, 2), AddOp("0", 1, 1))
    assert next_index(ops) == 4 and next_index((StepOp(),)) == 0


def test_different_starts_key_different_databases() -> None:
    assert starts_name([F2]) != starts_name([F4]) and starts_name([F2]) == starts_name([F2])


def test_a_session_from_a_trace_shows_its_violation_on_the_first_example() -> None:
    expected = {e.violation for e in F2.expect if hasattr(e, "violation")}
    report = fuzz("vllm-adaptive", examples=1, seed=0, starts=[F2], phases=(Phase.generate,), reduce_seconds=0.0)
    found = [c for c in report.counterexamples if c.kind in expected]
    assert found and found[0].example == 1
    assert found[0].trace.ops == F2.ops[:len(found[0].trace.ops)]  # the replay of the start, up to the violation
