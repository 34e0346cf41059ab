"""The torch runner executes exactly the steps whatif simulates, and calibration's pieces."""
from __future__ import annotations

import numpy as np

from tokenbudget.kernels.target import RunnerOptions
from tokenbudget.model import get_policy
from tokenbudget.whatif.cost_fitted import TERMS, FittedCost
from tokenbudget.whatif.simulator import simulate
from tokenbudget.whatif.workload import Lengths, synthetic
from tokenbudget.whatif_runner import (MEASURED_REQUESTS, POLICIES, RUNNER_CONFIG, calibration_workloads, measure, plan,
                                       validation_workload)

UNIT = FittedCost(dict.fromkeys(TERMS, 0.0) | {"per_step_s": 1.0}, {"what": "one second a step"})


def test_the_runner_runs_the_simulated_steps_and_times_each():
    load = synthetic(4, 2, None, Lengths(50, 300), Lengths(4, 16), (0.9, 0.6, 0.3), 5)
    for name in ("vllm-static", "vllm-adaptive"):
        measured = measure(RUNNER_CONFIG, name, load, RunnerOptions(), "cpu")
        simulated = simulate(RUNNER_CONFIG, get_policy(name), load, UNIT)
        assert measured.step_shapes == simulated.step_shapes
        assert np.all(np.diff(measured.step_end_s, prepend=0.0) > 0)
        assert simulated.step_end_s[-1] == len(simulated.step_shapes)  # one second a step


def test_validation_workloads_are_held_out():
    fitted = {(w.seed, w.concurrency) for w in calibration_workloads(0)}
    held = {(validation_workload(c, 1000).seed, c) for c in (1, 4, 16)}
    assert not fitted & held


def test_the_plan_interleaves_calibration_and_validation_and_alternates_the_rules():
    calibration = calibration_workloads(0)
    validation = {c: validation_workload(c, 1000) for c in (1, 4, 16)}
    turns = plan(calibration, validation)
    fitted = [t for t in turns if t.kind == "calibrate"]
    assert [t.load for t in fitted] == calibration and all(t.policies == POLICIES for t in fitted)
    for conc, load in validation.items():
        mine = [t for t in turns if t.kind == "validate" and t.key == conc]
        assert all(t.load is load for t in mine)
        assert len(mine) * len(load.requests) >= MEASURED_REQUESTS
        assert [t.policies for t in mine[:2]] == [POLICIES, POLICIES[::-1]]
    kinds = "".join(t.kind[0] for t in turns)
    assert "v" in kinds[:len(kinds) // 3] and "c" in kinds[-len(kinds) // 3:]  # neither kind bunched at one end
