"""The monitor judges vLLM's encoder budget and cache on multimodal requests
(tests/vllm/encoder_driver.py): vLLM 0.32, 0.33 and 0.34 keep ``encoder-cap`` and
``encoder-ready`` on a mixed workload; a slip planted in 0.33's encoder budget or cut
(tests/vllm/encoder_slips.py) is reported with the invariant it breaks; and each of them
breaks ``encoder-ready`` when priority scheduling preempts a request in the pass that scheduled
its encoder input (SPEC.md §2 ``encoder-ready``)."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from encoder_driver import ENCODER_BUDGET, ENCODER_CACHE, feature, multimodal_engine, run, run_priority_preemption
from encoder_slips import BY_NAME
from vllm_slips import plant

from tokenbudget import monitor
from tokenbudget.harness.vllm.folder import child_env

pytestmark = pytest.mark.vllm
TESTS = Path(__file__).resolve().parents[1]
BUDGET_ONE_SHORT = 23  # a's image (12) leaves 11: b's image (12) is one embedding past it


def run_child(engine: Path, budget: int = ENCODER_BUDGET, cache: int = ENCODER_CACHE, scenario: str = "mixed") -> dict:
    """An ``encoder_driver`` scenario on the vLLM in ``engine``, in a child process."""
    env = child_env(engine)
    env["PYTHONPATH"] = f"{env['PYTHONPATH']}:{TESTS}:{TESTS / 'vllm'}"
    done = subprocess.run([sys.executable, str(TESTS / "vllm" / "encoder_driver.py"), scenario, str(budget), str(cache)],
                          env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.splitlines()[-1])


def test_multimodal_requests_keep_the_encoder_invariants(vllm_imported: None) -> None:
    for budget in (ENCODER_BUDGET, BUDGET_ONE_SHORT):
        seen = run(multimodal_engine(budget))
        assert seen["violations"] == [] and seen["unfinished"] == []
        assert seen["encoder_steps"] >= 4


def test_a_request_is_cut_before_the_image_the_budget_left_cannot_encode(vllm_imported: None) -> None:
    engine = multimodal_engine()
    outputs = []
    schedule = engine.scheduler.schedule
    engine.scheduler.schedule = lambda: outputs.append(schedule()) or outputs[-1]
    assert run(engine, steps=0)["violations"] == []
    assert dict(outputs[0].scheduled_encoder_inputs) == {"a": [0]}  # a's image takes 12 of 16
    assert outputs[0].num_scheduled_tokens["b"] == 10  # b stops at its image's offset
    assert dict(outputs[1].scheduled_encoder_inputs) == {"b": [0]}


def test_a_grant_over_an_image_the_runner_lacks_is_not_ready(vllm_imported: None) -> None:
    engine = multimodal_engine()
    watched = monitor.attach(engine.scheduler)
    manager = engine.scheduler.encoder_cache_manager
    original = manager.check_and_update_cache
    manager.check_and_update_cache = lambda request, i: original(request, i) or request.request_id == "b"
    run(engine, steps=6)  # b's image taken as cached: never encoded
    assert {v.violation.invariant for v in watched.violations} == {"encoder-ready"}
    assert "b is granted 12 embeddings of encoder input 0 (B)" in str(watched.violations[0])


def test_an_entry_a_test_puts_in_the_cache_by_hand_counts_as_encoded(vllm_imported: None) -> None:
    engine = multimodal_engine()
    watched = monitor.attach(engine.scheduler)
    outputs = []
    schedule = engine.scheduler.schedule
    engine.scheduler.schedule = lambda: outputs.append(schedule()) or outputs[-1]
    engine.step({})
    engine.add("primed", 30, 2, mm_features=[feature(4, 12, "P", None)])
    request = engine.scheduler.requests["primed"]
    engine.scheduler.encoder_cache_manager.allocate(request, 0)  # as vLLM's own tests warm the cache
    for _ in range(4):
        engine.step({})
    assert outputs[1].num_scheduled_tokens["primed"] == 30 and not any(o.scheduled_encoder_inputs for o in outputs)
    assert watched.violations == [] and watched.stats.encoder_steps == 1


@pytest.mark.parametrize("folder", ["vllm033_path", "vllm034_path"])
def test_vllm_033_and_034_keep_the_encoder_invariants(folder: str, request: pytest.FixtureRequest) -> None:
    seen = run_child(request.getfixturevalue(folder), BUDGET_ONE_SHORT)
    assert seen["violations"] == [] and seen["unfinished"] == [] and seen["encoder_steps"] >= 4


@pytest.mark.parametrize(("slip", "budget", "broken"), [
    ("encoder-budget-off-by-one", BUDGET_ONE_SHORT, "encoder-cap"),
    ("encoder-cut-one-late", ENCODER_BUDGET, "encoder-ready"),
])
def test_a_slip_in_the_encoder_budget_or_cut_is_reported(slip: str, budget: int, broken: str, vllm033_path: Path,
                                                         tmp_path: Path) -> None:
    engine = plant(vllm033_path, BY_NAME[slip], tmp_path / "engine")
    seen = run_child(engine, budget)
    assert seen["violations"] and {invariant for invariant, _ in seen["violations"]} == {broken}


LOST_INPUT = "r is granted 4 embeddings of encoder input 2 (I3), which is neither encoded in the step nor in the encoder cache"


def test_a_same_pass_priority_preemption_loses_the_encoder_input_it_scheduled(vllm_imported: None) -> None:
    seen = run_priority_preemption()
    assert {invariant for invariant, _ in seen["violations"]} == {"encoder-ready"}
    assert LOST_INPUT in seen["violations"][0][1]


@pytest.mark.parametrize("folder", ["vllm033_path", "vllm034_path"])
def test_0_33_and_0_34_lose_it_too(folder: str, request: pytest.FixtureRequest) -> None:
    seen = run_child(request.getfixturevalue(folder), scenario="priority-preemption")
    assert {invariant for invariant, _ in seen["violations"]} == {"encoder-ready"}
    assert LOST_INPUT in seen["violations"][0][1]


def test_an_encoder_given_after_the_scheduler_is_built_is_judged_on_its_limits(vllm_imported: None) -> None:
    with monitor.watch() as watched:
        engine = multimodal_engine()  # watched from its __init__, given its encoder after, as vLLM's tests do
    engine.add("a", 40, 2, mm_features=[feature(4, 12, "A", None)])
    for _ in range(4):
        engine.step({})
    assert watched.violations == [] and watched.stats.encoder_steps == 1
