"""The torch runner executes exactly the steps whatif simulates, and calibration's pieces."""
from __future__ import annotations

import numpy as np

from tokenbudget.kernels.target import RunnerOptions
from tokenbudget.model import get_policy
from tokenbudget.whatif.cost_fitted import TERMS, FittedCost
from tokenbudget.whatif.simulator import simulate
from tokenbudget.whatif.workload import Lengths, synthetic
from tokenbudget.whatif_runner import RUNNER_CONFIG, calibration_workloads, measure, validation_workload

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
