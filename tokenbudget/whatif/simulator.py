"""The virtual clock: a workload served by the reference scheduler, each step charged what a
cost model says it takes.

A step starts when the previous one ends; requests whose client sends them during a step
join the scheduler at the next step; a request's tokens are emitted at the end of the step
that produced them. A client sends its request at its arrival, or when a slot frees under
the workload's concurrency.
"""
from __future__ import annotations

import heapq
from dataclasses import dataclass, field
from typing import Callable, Optional, Protocol

import numpy as np

from ..model import BudgetConfig, BudgetPolicy, scheduler_for
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
    """A policy's run: per-request times, and per step its end time, tokens, rows, sequences."""

    policy: str
    requests: dict[str, RequestTimes]
    step_end_s: np.ndarray
    step_tokens: np.ndarray
    step_rows: np.ndarray
    step_seqs: np.ndarray
    token_cap: int


Progress = Callable[[int, int], None]  # (requests finished, requests in all)


def simulate(cfg: BudgetConfig, policy: BudgetPolicy, workload: Workload, cost: CostModel,
             progress: Progress | None = None) -> RunResult:
    """Serve ``workload`` under ``policy``. Raises ConfigError (the policy refuses cfg),
    WorkloadError (a prompt the config cannot hold), SimulationError (a stall or a failed pass)."""
    for r in workload.requests:
        if r.prompt_len >= cfg.max_model_len:
            raise WorkloadError(f"request {r.id}: prompt of {r.prompt_len} tokens does not fit max_model_len "
                                f"{cfg.max_model_len}; shorten --prompt-len or raise --max-model-len")
    sched = scheduler_for(cfg, policy)
    draws = AcceptanceDraws(workload.acceptance, cfg.num_speculative_tokens, workload.seed)
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
    tokens: list[int] = []
    rows: list[int] = []
    seqs: list[int] = []
    while pending or in_flight:
        while pending and in_flight < limit and pending[-1].arrival_s <= now:
            r = pending.pop()
            sched.add_request(r.id, r.prompt_len, r.output_len)
            times[r.id] = RequestTimes(max(r.arrival_s, heapq.heappop(free_since)), r.prompt_len, r.output_len)
            outputs[r.id] = 0
            in_flight += 1
        if not in_flight:
            now = pending[-1].arrival_s
            continue
        record = sched.schedule()
        if record.error is not None:
            raise SimulationError(f"{policy.name}: step {record.step} failed: {record.error}")
        if not record.num_scheduled_tokens:
            if pending and in_flight < limit:
                now = max(now, pending[-1].arrival_s)
                continue
            raise SimulationError(f"{policy.name} scheduled nothing at step {record.step} with {len(sched.running)} "
                                  f"running and {len(sched.waiting)} waiting: it stalls on this workload")
        shape = StepShape.of(record)
        now += cost.step_seconds(shape)
        ends.append(now)
        tokens.append(shape.tokens)
        rows.append(record.total_runner_rows)
        seqs.append(shape.num_seqs)
        accepted = {}
        for rid, drafts in record.scheduled_draft_tokens.items():
            if rid not in record.prefill:
                step = decode_steps.get(rid, 0)
                decode_steps[rid] = step + 1
                accepted[rid] = draws.accepted(index[rid], step, drafts, times[rid].output_len)
        outcome = sched.update_from_output(record, accepted)
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
                heapq.heappush(free_since, now)
                finished += 1
                draws.forget(index[rid])
        if progress is not None:
            progress(finished, len(workload.requests))
    return RunResult(policy.name, times, np.array(ends), np.array(tokens), np.array(rows), np.array(seqs),
                     sched.limits.max_num_scheduled_tokens)

