"""whatif on the torch runner: workloads executed with real forward passes, each step's
measured time the clock. Calibration fits a cost model on a designed set of workloads;
validation sets the runner's measured TTFT beside whatif's prediction on other workloads,
the runs of both interleaved."""
from __future__ import annotations

import platform
import time
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Callable, Iterator

import numpy as np
import torch

from .kernels.target import RunnerOptions, RunnerTarget
from .model import BudgetConfig, get_policy
from .whatif import metrics
from .whatif.cost_fitted import FittedCost, fit
from .whatif.simulator import CostModel, RunResult, check_prompts, serve, simulate
from .whatif.step_shape import CACHED_KEYS, StepShape
from .whatif.workload import Lengths, RequestSpec, Workload, synthetic

# A deployment the tiny CPU model serves in seconds, where the old rule's budget (256 - 6 x 32 = 64)
# is a quarter of the new one's for a lone request (250).
RUNNER_CONFIG = BudgetConfig(max_num_batched_tokens=256, max_num_seqs=32, num_speculative_tokens=7, method="dspark",
                             engine_version="0.32", max_model_len=2048, num_kv_blocks=4096)
POLICIES = ("vllm-static", "vllm-adaptive")
ACCEPTANCE = (0.8, 0.7, 0.6, 0.5, 0.4, 0.3, 0.2)
Progress = Callable[[str], None]
MEASURED_REQUESTS = 96  # requests measured per concurrency and rule in validation, the workload repeated
LONE_PROMPTS = (16, 100, 250, 400, 600, 800, 1000, 1200, 1500, 2000)


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
    """The designed set: lone prompts (prefill chunks of every size at contexts from 0 to past
    what validation reaches) and batches of 2, 8 and 24 clients (decodes beside prefills, many
    sequences)."""
    lone = [Workload((RequestSpec("c", 0.0, p, 8),), 1, ACCEPTANCE, seed) for p in LONE_PROMPTS]
    batches = [synthetic(2 * c, c, None, Lengths(20, 900), Lengths(8, 48), ACCEPTANCE, seed + c) for c in (2, 8, 24)]
    return lone + batches


def validation_workload(concurrency: int, seed: int) -> Workload:
    """Held-out: a seed and client counts the calibration never ran."""
    return synthetic(max(3 * concurrency, 12), concurrency, None, Lengths(100, 1200), Lengths(16, 64), ACCEPTANCE, seed)


@dataclass(frozen=True)
class Turn:
    """Runs that go back to back: ``load`` under each of ``policies`` in that order.
    ``key`` names what the runs measure: a calibration workload's index, or a concurrency."""

    kind: str  # "calibrate" or "validate"
    key: int
    load: Workload
    policies: tuple[str, ...]


def plan(calibration: list[Workload], validation: dict[int, Workload]) -> list[Turn]:
    """Every calibration workload under both rules, and each validation workload again until
    about ``MEASURED_REQUESTS`` requests were measured per rule (the rules taking turns, each
    going first in every other turn), all spread evenly over one sequence: a passing load on a
    shared machine weighs on the fit and on every measurement alike."""
    fit = [Turn("calibrate", i, load, POLICIES) for i, load in enumerate(calibration)]
    measured = [[Turn("validate", conc, load, POLICIES[::1 if t % 2 == 0 else -1])
                 for t in range(max(1, -(-MEASURED_REQUESTS // len(load.requests))))]
                for conc, load in validation.items()]
    return spread([fit, *measured])


def spread(sequences: list[list[Turn]]) -> list[Turn]:
    """The turns of every sequence in one list, each sequence's order kept and its turns evenly spaced."""
    keyed = [((i + 0.5) / len(turns), which, i) for which, turns in enumerate(sequences) for i in range(len(turns))]
    return [sequences[which][i] for _, which, i in sorted(keyed)]


def calibrate_and_validate(cfg: BudgetConfig, options: RunnerOptions, concurrencies: tuple[int, ...], seed: int,
                           validation_seed: int, clock: str,
                           progress: Progress) -> tuple[FittedCost, dict[str, Any], list[dict[str, Any]]]:
    """Execute the ``plan``, fit the NNLS cost model on every calibration step (and on nothing
    else), then set each concurrency's measured median TTFT per rule beside the fitted
    model's prediction on the same workload. Returns the model, its fit quality (median and
    p90 relative error per step) and one row per concurrency with the old -> new change."""
    validation = {conc: validation_workload(conc, validation_seed) for conc in concurrencies}
    turns = plan(calibration_workloads(seed), validation)
    shapes: list[StepShape] = []
    seconds: list[float] = []
    ttfts: dict[tuple[int, str], list[float]] = {(conc, name): [] for conc in concurrencies for name in POLICIES}
    with one_thread():
        measure(cfg, POLICIES[1], calibration_workloads(seed)[-3], options, clock)  # warm-up, not kept
        for done, turn in enumerate(turns):
            for name in turn.policies:
                what = f"workload {turn.key + 1}" if turn.kind == "calibrate" else f"concurrency {turn.key}"
                progress(f"{turn.kind}: {what} under {name} (run {done + 1} of {len(turns)})")
                run = measure(cfg, name, turn.load, options, clock)
                if turn.kind == "calibrate":
                    shapes += run.step_shapes
                    seconds += list(np.diff(run.step_end_s, prepend=0.0))
                else:
                    ttfts[turn.key, name] += list(metrics.ttfts(run))
    source = {"what": f"torch runner, model {options.model}, on {options.device} ({platform.processor() or platform.machine()}), "
                      f"torch {torch.__version__}, 1 thread, {clock} clock",
              "how": f"NNLS on the {clock}-clock seconds of every step of whatif_runner.calibration_workloads under "
                     f"{' and '.join(POLICIES)}, rows reweighted by a first fit's prediction",
              "config": cfg.to_dict(), "steps": len(shapes), "seed": seed, "cached_keys": CACHED_KEYS}
    cost = fit(shapes, seconds, source)
    errors = np.abs(np.array([cost.step_seconds(s) for s in shapes]) / np.array(seconds) - 1)
    quality = {"steps": len(shapes), "median_step_error": float(np.median(errors)),
               "p90_step_error": float(np.percentile(errors, 90))}
    rows = [_compare(cfg, cost, conc, validation[conc], ttfts) for conc in concurrencies]
    return cost, quality, rows


def _compare(cfg: BudgetConfig, cost: CostModel, conc: int, load: Workload,
             ttfts: dict[tuple[int, str], list[float]]) -> dict[str, Any]:
    """One concurrency's row: per rule the measured and predicted median TTFT, and the change of each."""
    row: dict[str, Any] = {"concurrency": conc, "requests_per_rule": len(ttfts[conc, POLICIES[0]])}
    for name in POLICIES:
        predicted = float(np.median(metrics.ttfts(simulate(cfg, get_policy(name), load, cost))))
        median = float(np.median(ttfts[conc, name]))
        row[name] = {"measured_ttft_p50_s": median, "predicted_ttft_p50_s": predicted,
                     "error_pct": (predicted / median - 1) * 100}
    old, new = row[POLICIES[0]], row[POLICIES[1]]
    row["measured_change_pct"] = (new["measured_ttft_p50_s"] / old["measured_ttft_p50_s"] - 1) * 100
    row["predicted_change_pct"] = (new["predicted_ttft_p50_s"] / old["predicted_ttft_p50_s"] - 1) * 100
    return row
