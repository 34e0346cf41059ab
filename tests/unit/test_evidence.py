"""The floor a fuzz run's ok rests on (``tokenbudget.evidence``)."""
from __future__ import annotations

from tokenbudget.evidence import FLOORS, REAL_ENGINE, Floor, floor_of, shortfall
from tokenbudget.targets import ENGINES, MODEL


def test_nothing_run_is_never_evidence_on_any_target() -> None:
    for target in (*FLOORS, "an-unknown-target"):
        assert shortfall(0, 0, floor_of(target)) is not None
        assert shortfall(0, 0, floor_of(target, examples_asked=1)) is not None


def test_a_real_engine_needs_a_few_examples() -> None:
    for engine in ENGINES:
        assert floor_of(engine) == REAL_ENGINE and REAL_ENGINE.examples > FLOORS[MODEL].examples
    assert shortfall(2, 500, floor_of("vllm")) == \
        "2 examples and 500 steps ran, under the floor of 3 examples and 10 steps"
    assert shortfall(REAL_ENGINE.examples, REAL_ENGINE.steps, floor_of("vllm")) is None


def test_a_run_that_asked_for_fewer_examples_needs_only_those_and_a_step() -> None:
    assert floor_of("vllm", examples_asked=1) == Floor(1, REAL_ENGINE.steps)
    assert floor_of(MODEL, examples_asked=50) == FLOORS[MODEL]
    assert shortfall(1, 0, floor_of(MODEL, examples_asked=1)) == \
        "1 example and 0 steps ran, under the floor of 1 example and 1 step"
