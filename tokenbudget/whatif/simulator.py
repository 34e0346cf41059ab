"""The virtual clock: a workload served by the reference scheduler, each step charged what a
cost model says it takes.

A step starts when the previous one ends; requests whose client sends them during a step
join the scheduler at the next step; a request's tokens are emitted at the end of the step
that produced them. A client sends its request at its arrival, or when a slot frees under
the workload's concurrency.
"""
from __future__ import annotations

import heapq
import time
from dataclasses import dataclass, field
from typing import Callable, Mapping, Optional, Protocol

import numpy as np

from ..model import BudgetConfig, BudgetPolicy, SchedulerLoop
from ..model.target import ModelTarget
from ..spec.records import StepOutcome, StepRecord
from ..spec.trace import AddOp, Op, StepOp
from .acceptance import AcceptanceDraws
from .step_shape import StepShape
from .workload import Workload, WorkloadError


class CostModel(Protocol):
    def step_seconds(self, shape: StepShape) -> float:
        """Seconds one step of this shape takes."""


class SimulationError(RuntimeError):
    """The scheduler cannot serve the workload (it stalls, or a pass fails)."""


@dataclass
class RequestTimes:
    """One request's clock: sent, first token, finished; ``gaps`` between emitted chunks."""

    sent_s: float
    prompt_len: int
    output_len: int
    first_token_s: Optional[float] = None
    finish_s: Optional[float] = None
    last_emit_s: float = 0.0
    gaps: list[float] = field(default_factory=list)


@dataclass
class RunResult:
    """A policy's run: per-request times, and per step its end time, tokens, rows, sequences, shape."""

    policy: str
    requests: dict[str, RequestTimes]
    step_end_s: np.ndarray
    step_tokens: np.ndarray
    step_rows: np.ndarray
    step_seqs: np.ndarray
    token_cap: int
    step_shapes: list[StepShape] = field(default_factory=list)


Progress = Callable[[int, int], None]  # (requests finished, requests in all)
StepSeconds = Callable[[StepRecord, float], float]  # (the step's record, its measured seconds) -> its seconds


class Target(Protocol):
    """What ``serve`` drives: ``model.target.ModelTarget``, or a target that executes the steps."""

    scheduler: SchedulerLoop

    def add(self, op: AddOp) -> None: ...

    def step(self, accepted: Mapping[str, int]) -> tuple[StepRecord, StepOutcome]: ...


def check_prompts(cfg: BudgetConfig, workload: Workload) -> None:
    """WorkloadError for a prompt that cfg's max_model_len cannot hold."""
    for r in workload.requests:
        if r.prompt_len >= cfg.max_model_len:
            raise WorkloadError(f"request {r.id}: prompt of {r.prompt_len} tokens does not fit max_model_len "
                                f"{cfg.max_model_len}; shorten --prompt-len or raise --max-model-len")


def simulate(cfg: BudgetConfig, policy: BudgetPolicy, workload: Workload, cost: CostModel,
             progress: Progress | None = None, ops: list[Op] | None = None) -> RunResult:
    """Serve ``workload`` under ``policy`` on the cost model's clock. Raises ConfigError (the
    policy refuses cfg), WorkloadError (a prompt the config cannot hold), SimulationError."""
    check_prompts(cfg, workload)
    return serve(ModelTarget(cfg, policy), policy.name, workload,
                 lambda record, _: cost.step_seconds(StepShape.of(record)), progress, ops=ops)


def serve(target: Target, name: str, workload: Workload, step_seconds: StepSeconds,
          progress: Progress | None = None, clock: Callable[[], float] = time.perf_counter,
          ops: list[Op] | None = None) -> RunResult:
    """Serve ``workload`` on ``target``, each step taking ``step_seconds`` of the virtual
    clock (handed the step's seconds on ``clock``); the accepted drafts are the workload's
    draws. ``ops`` (when given) gets the ops applied, a trace's. SimulationError on a stall
    or a failed step."""
    sched = target.scheduler
    draws = AcceptanceDraws(workload.acceptance, sched.k, workload.seed)
    index = {r.id: i for i, r in enumerate(workload.requests)}
    decode_steps: dict[str, int] = {}
    times: dict[str, RequestTimes] = {}
    outputs: dict[str, int] = {}
    pending = list(workload.requests)
    pending.reverse()  # popped from the end: arrival order
    limit = workload.concurrency or len(pending)
    in_flight, finished, now = 0, 0, 0.0
    free_since = [0.0] * limit  # a heap: when each free client slot freed
    ends: list[float] = []
    shapes: list[StepShape] = []
    rows: list[int] = []
    while pending or in_flight:
        while pending and in_flight < limit and pending[-1].arrival_s <= now:
            r = pending.pop()
            add = AddOp(r.id, r.prompt_len, r.output_len)
            target.add(add)
            if ops is not None:
                ops.append(add)
            times[r.id] = RequestTimes(max(r.arrival_s, heapq.heappop(free_since)), r.prompt_len, r.output_len)
            outputs[r.id] = 0
            decode_steps[r.id] = 0
            in_flight += 1
        if not in_flight:
            now = pending[-1].arrival_s
            continue
        accepted = {r.request_id: draws.accepted(index[r.request_id], decode_steps[r.request_id], sched.k, r.max_tokens)
                    for r in sched.running if not r.is_prefill_chunk}
        started = clock()
        record, outcome = target.step(accepted)
        wall = clock() - started
        if ops is not None:
            ops.append(StepOp({rid: n for rid, n in accepted.items() if n}))
        if record.error is not None:
            raise SimulationError(f"{name}: step {record.step} failed: {record.error}")
        if not record.num_scheduled_tokens:
            raise SimulationError(f"{name} scheduled nothing at step {record.step} with {len(sched.running)} "
                                  f"running and {len(sched.waiting)} waiting: it stalls on this workload")
        now += step_seconds(record, wall)
        ends.append(now)
        shapes.append(StepShape.of(record))
        rows.append(record.total_runner_rows)
        for rid in record.num_scheduled_tokens:
            if rid not in record.prefill:
                decode_steps[rid] += 1
        for rid, state in outcome.requests.items():
            emitted = state.num_output_tokens - outputs[rid]
            t = times[rid]
            if emitted > 0:
                outputs[rid] = state.num_output_tokens
                if t.first_token_s is None:
                    t.first_token_s = now
                else:
                    t.gaps.append(now - t.last_emit_s)
                t.last_emit_s = now
            if state.status in ("finished", "aborted"):
                t.finish_s = now
                in_flight -= 1
                finished += 1
                del outputs[rid]
                heapq.heappush(free_since, now)
                draws.forget(index[rid])
        if progress is not None:
            progress(finished, len(workload.requests))
    return RunResult(name, times, np.array(ends), np.array([s.tokens for s in shapes]), np.array(rows),
                     np.array([s.num_seqs for s in shapes]), sched.limits.max_num_scheduled_tokens, shapes)

