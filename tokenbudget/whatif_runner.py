"""whatif on the torch runner: workloads executed with real forward passes, each step's
wall-clock time the clock. Calibration fits a cost model on a designed set of workloads;
validation sets the runner's measured TTFT beside whatif's prediction on other workloads."""
from __future__ import annotations

import platform
import time
from contextlib import contextmanager
from typing import Any, Callable, Iterator

import numpy as np
import torch

from .kernels.target import RunnerOptions, RunnerTarget
from .model import BudgetConfig, get_policy
from .whatif import metrics
from .whatif.cost_fitted import FittedCost, fit
from .whatif.simulator import CostModel, RunResult, check_prompts, serve, simulate
from .whatif.workload import Lengths, RequestSpec, Workload, synthetic

# A deployment the tiny CPU model serves in seconds, where the old rule's budget (256 - 6 x 32 = 64)
# is a quarter of the new one's for a lone request (250).
RUNNER_CONFIG = BudgetConfig(max_num_batched_tokens=256, max_num_seqs=32, num_speculative_tokens=7, method="dspark",
                             engine_version="0.32", max_model_len=2048, num_kv_blocks=4096)
POLICIES = ("vllm-static", "vllm-adaptive")
ACCEPTANCE = (0.8, 0.7, 0.6, 0.5, 0.4, 0.3, 0.2)
Progress = Callable[[str], None]
MEASURED_REQUESTS = 48  # requests measured per concurrency and rule in validation, the workload repeated


@contextmanager
def one_thread() -> Iterator[None]:
    """torch on one CPU thread while it lasts: steady timings on a shared machine."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)


# The clocks a measured step can be timed on: wall-clock, or this thread's CPU time (torch on
# one thread computes in it), which other processes on a shared machine do not inflate.
CLOCKS: dict[str, Callable[[], float]] = {"wall": time.perf_counter, "cpu": time.thread_time}


def measure(cfg: BudgetConfig, policy_name: str, load: Workload, options: RunnerOptions, clock: str) -> RunResult:
    """``load`` executed on the runner under the policy (the workload's accepted drafts
    forced), every step timed on ``clock`` (a key of ``CLOCKS``)."""
    check_prompts(cfg, load)
    target = RunnerTarget(cfg, get_policy(policy_name), options)
    return serve(target, policy_name, load, lambda record, seconds: seconds, clock=CLOCKS[clock])


def calibration_workloads(seed: int) -> list[Workload]:
    """The designed set: lone prompts (prefill chunks of every size, growing contexts) and
    batches of 2, 8 and 24 clients (decodes beside prefills, many sequences)."""
    lone = [Workload((RequestSpec("c", 0.0, p, 8),), 1, ACCEPTANCE, seed) for p in (16, 100, 400, 1000, 1500, 2000)]
    batches = [synthetic(2 * c, c, None, Lengths(20, 900), Lengths(8, 48), ACCEPTANCE, seed + c) for c in (2, 8, 24)]
    return lone + batches


def validation_workload(concurrency: int, seed: int) -> Workload:
    """Held-out: a seed and client counts the calibration never ran."""
    return synthetic(max(3 * concurrency, 12), concurrency, None, Lengths(100, 1200), Lengths(16, 64), ACCEPTANCE, seed)


def calibrate(cfg: BudgetConfig, options: RunnerOptions, seed: int, clock: str,
              progress: Progress) -> tuple[FittedCost, dict]:
    """Execute the designed workloads under both vLLM rules, fit the NNLS cost model on every
    step; returns it and its fit quality (median and p90 relative error per step)."""
    shapes, seconds = [], []
    with one_thread():
        measure(cfg, POLICIES[1], calibration_workloads(seed)[4], options, clock)  # warm-up, not kept
        for i, load in enumerate(calibration_workloads(seed)):
            for name in POLICIES:
                progress(f"calibrate: workload {i + 1} of {len(calibration_workloads(seed))} under {name}")
                run = measure(cfg, name, load, options, clock)
                shapes += run.step_shapes
                seconds += list(np.diff(run.step_end_s, prepend=0.0))
    source = {"what": f"torch runner, model {options.model}, on {options.device} ({platform.processor() or platform.machine()}), "
                      f"torch {torch.__version__}, 1 thread, {clock} clock",
              "how": f"NNLS on the {clock}-clock seconds of every step of whatif_runner.calibration_workloads under "
                     f"{' and '.join(POLICIES)}, rows reweighted by a first fit's prediction",
              "config": cfg.to_dict(), "steps": len(shapes), "seed": seed}
    cost = fit(shapes, seconds, source)
    errors = np.abs(np.array([cost.step_seconds(s) for s in shapes]) / np.array(seconds) - 1)
    return cost, {"steps": len(shapes), "median_step_error": float(np.median(errors)),
                  "p90_step_error": float(np.percentile(errors, 90))}


def validate(cfg: BudgetConfig, cost: CostModel, options: RunnerOptions, concurrencies: tuple[int, ...], seed: int,
             clock: str, progress: Progress) -> list[dict[str, Any]]:
    """Per concurrency and rule: the runner's measured median TTFT beside whatif's predicted
    one on the same workload, and the old -> new change of each. A small workload runs
    again (the rules taking turns) until about ``MEASURED_REQUESTS`` requests were measured,
    so that a passing load on a shared machine weighs on both rules alike."""
    rows = []
    with one_thread():
        for conc in concurrencies:
            load = validation_workload(conc, seed)
            repeats = max(1, -(-MEASURED_REQUESTS // len(load.requests)))
            measured: dict[str, list[float]] = {name: [] for name in POLICIES}
            for turn in range(repeats):
                for name in POLICIES:
                    progress(f"validate: concurrency {conc} under {name} ({turn + 1} of {repeats})")
                    measured[name] += list(metrics.ttfts(measure(cfg, name, load, options, clock)))
            row: dict[str, Any] = {"concurrency": conc, "repeats": repeats}
            for name in POLICIES:
                predicted = float(np.median(metrics.ttfts(simulate(cfg, get_policy(name), load, cost))))
                median = float(np.median(measured[name]))
                row[name] = {"measured_ttft_p50_s": median, "predicted_ttft_p50_s": predicted,
                             "error_pct": (predicted / median - 1) * 100}
            old, new = row[POLICIES[0]], row[POLICIES[1]]
            row["measured_change_pct"] = (new["measured_ttft_p50_s"] / old["measured_ttft_p50_s"] - 1) * 100
            row["predicted_change_pct"] = (new["predicted_ttft_p50_s"] / old["predicted_ttft_p50_s"] - 1) * 100
            rows.append(row)
    return rows
