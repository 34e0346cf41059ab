"""AsyncVllmEngine: vLLM's ``AsyncScheduler`` driven as its engine loop drives it.

``EngineCore.step_with_batch_queue`` (vllm/v1/engine/core.py:698-810 (vLLM 0.32.0)) keeps
a queue of two batches: it schedules step N, then applies step N-1's output. So each
``step`` here schedules once and applies the fake runner's output of the step before,
with the drafts accepted that were asked for that step. No draft proposal reaches the
scheduler (``post_step`` skips it under async, core.py:689-696): a decode's drafts are the
scheduler's -1 placeholders. Model Runner V2 fills them with the drafts it keeps per
request; the V1 runner only for a request it ran in the step before, so there a
placeholder scheduled for a request the step before left out is stale. The fake runner
accepts drafts only for the batch before (rejecting V2's kept drafts, as it may any draft).
"""
from __future__ import annotations

import os
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Mapping

from ...model.vllm.async_loop import runs_async, worker_keeps_drafts
from . import observe
from .engine import VllmEngine, VllmStep

if TYPE_CHECKING:
    from vllm.v1.core.sched.output import SchedulerOutput
    from vllm.v1.outputs import ModelRunnerOutput


SYNC_ENV = "TOKENBUDGET_VLLM_SYNC"  # "0": AsyncScheduler (``--async``); "1": the synchronous Scheduler (``--sync``)


def deploys_async(method: str | None, configured: bool) -> bool:
    """Whether the vLLM target runs ``AsyncScheduler`` for a deployment drafting with
    ``method``: where vLLM would serve it async (vllm/config/vllm.py:1585-1610 (vLLM 0.32.0)),
    on ``--async`` (``SYNC_ENV`` "0", inherited by worker and child processes), not on
    ``--sync`` ("1"), and without either as ``configured`` (the config's ``async_scheduling``:
    fuzz and conform deploy async by default, a trace says how it was found)."""
    mode = os.environ.get(SYNC_ENV)
    return (configured if mode is None else mode == "0") and runs_async(method)


@dataclass(frozen=True)
class InFlight:
    """A batch scheduled whose output the engine has not applied: the scheduler's output,
    the fake runner's, and the requests that sample in it."""

    out: SchedulerOutput
    runner_output: ModelRunnerOutput
    samples: frozenset[str]


class AsyncVllmEngine(VllmEngine):
    """``VllmEngine`` over ``AsyncScheduler``: outputs one step late (``cfg.async_scheduling``)."""

    worker_fills_placeholders = True
    in_flight: InFlight | None = None
    sampled_last: frozenset[str] = frozenset()  # the requests the last batch sampled: the worker has their drafts

    def step(self, accepted: Mapping[str, int]) -> VllmStep:
        """Schedule once, then apply the output of the step before (if any)."""
        sched = self.scheduler
        running_before = {r.request_id for r in sched.running}
        scheduled = self._pass()
        if isinstance(scheduled, VllmStep):
            return scheduled
        index, out, preempted, record = scheduled
        samples = observe.samples(sched, out)
        cfg = self.cfg
        keeps = worker_keeps_drafts(self.version.model_version, cfg.method, cfg.parallel_drafting)
        record = observe.async_record(record, out, running_before, self.sampled_last, keeps)
        fresh = {rid: n for rid, n in accepted.items() if rid in self.sampled_last}  # V2's kept drafts: rejected
        runner_output, _ = self._run_model(out, fresh)
        previous, self.in_flight = self.in_flight, InFlight(out, runner_output, samples)
        self.sampled_last = samples
        if out.num_scheduled_tokens or preempted or (previous is not None and previous.samples):
            self._state_changes += 1
        requests = observe.scheduled_requests(sched, out, preempted)
        try:
            if previous is not None:
                requests.update((rid, sched.requests[rid]) for rid in previous.samples if rid in sched.requests)
                sched.update_from_output(previous.out, previous.runner_output)
        except Exception as exc:
            return VllmStep(replace(record, error=observe.engine_error(exc)), preempted)
        return VllmStep(record, preempted, observe.outcome(index, requests, preempted).requests)
