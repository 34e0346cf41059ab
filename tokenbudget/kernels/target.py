"""RunnerTarget: the reference scheduler with the torch runner executing every step it makes."""
from __future__ import annotations

import time
from dataclasses import dataclass, replace
from typing import Mapping

import torch

from ..model.target import ModelTarget
from ..model import BudgetConfig, BudgetPolicy, ConfigError, methods
from ..model.physical_need import physical_need
from ..spec.records import StepOutcome, StepRecord
from ..spec.trace import AddOp
from .acceptance import Rule
from .errors import DeviceOutOfMemory
from .footprint import check_fits
from .memory import cap_allocator
from .models import MODEL_SPECS
from .prompts import prompt_tokens
from .report import RunnerReport, StepReport
from .runner import ModelRunner, StepExecution


@dataclass(frozen=True)
class RunnerOptions:
    """How the runner target runs: ``model`` names a MODEL_SPECS entry; ``memory_cap``
    (CUDA only) sizes the allocator for B rows and lets steps allocate past B."""

    device: str = "cpu"
    mode: str = "forced"  # forced | live
    rule: Rule = "greedy"
    model: str = "tiny"
    seed: int = 0
    memory_cap: bool = False


def runner_refusal(cfg: BudgetConfig, policy: BudgetPolicy) -> str | None:
    """Why the runner cannot execute the policy's steps on cfg faithfully, or None. Its model
    drafter drafts in the step that sampled, writing KV at the lookahead slots; a loop that
    drafts at the start of the next decode instead (``drafts_after_sampling`` off) holds no
    KV there, and the runner would report an overflow the engine never has. The drafter is
    the one of the engine's version table (``physical_need``), whatever the policy's ``table``."""
    try:
        table = physical_need(policy, cfg).table
    except ConfigError:
        return None  # no engine runs the method: the model refuses the config first
    if methods.drafter(table, cfg.method) == methods.MODEL_DRAFTER and not policy.loop.drafts_after_sampling:
        return (f"the torch runner drafts with a model drafter in the step that sampled; {policy.loop.__name__} "
                f"drafts at the start of the next decode, in its KV reservation: replay {cfg.method} traces of "
                f"{policy.name} on --target model, or use method ngram on the runner")
    return None


class RunnerTarget:
    """Raises ConfigError on construction when the policy refuses cfg or the device has not
    the memory its buffers need (``footprint.check_fits``), ValueError for a memory cap
    off CUDA."""

    def __init__(self, cfg: BudgetConfig, policy: BudgetPolicy, options: RunnerOptions) -> None:
        if options.memory_cap and options.device != "cuda":
            raise ValueError("the memory cap needs device cuda")
        refusal = runner_refusal(cfg, policy)
        if refusal is not None:
            raise ConfigError(refusal)
        self.model = ModelTarget(cfg, policy)
        self.scheduler = self.model.scheduler
        self.limits = self.model.limits
        self.options = options
        spec = replace(MODEL_SPECS[options.model], seed=options.seed)
        check_fits(self.limits, spec, torch.device(options.device), whole_pool=options.memory_cap)
        drafter = methods.drafter(self.scheduler.need.table, cfg.method)
        self.runner = ModelRunner(self.limits, drafter, spec, options.device, options.rule, options.seed,
                                  growable_inputs=options.memory_cap)
        self.report = RunnerReport(options.device, options.mode, options.rule, spec)
        if options.memory_cap:
            self.report.memory_cap = cap_allocator(self.runner)
        self._cuda = self.runner.device.type == "cuda"

    def add(self, op: AddOp) -> None:
        self.model.add(op)
        self.runner.add_request(op.id, prompt_tokens(op, self.runner.model.spec.vocab_size))

    def abort(self, request_id: str) -> None:
        self.model.abort(request_id)
        self.runner.drop(request_id)

    def step(self, accepted: Mapping[str, int]) -> tuple[StepRecord, StepOutcome]:
        record = self.model.schedule()
        if record.error is not None:  # the pass itself failed: nothing reaches the runner
            return record, StepOutcome(step=record.step, requests={})
        forced = accepted if self.options.mode == "forced" else None
        execution, fault = self._execute(record, forced)
        if fault is not None:
            return replace(record, error=fault, raised_by="runner"), StepOutcome(step=record.step, requests={})
        assert execution is not None
        return self.model.apply_output(record, accepted if forced is not None else execution.accepted)

    def _execute(self, record: StepRecord, forced: Mapping[str, int] | None) -> tuple[StepExecution | None, str | None]:
        """Run the step on the runner and report it; the fault, if any, as "Type: message"."""
        device = self.runner.device
        if self._cuda:
            torch.cuda.reset_peak_memory_stats(device)
        start = time.perf_counter()
        execution: StepExecution | None = None
        fault: Exception | None = None
        try:
            execution = self.runner.execute(record, forced)
        except torch.cuda.OutOfMemoryError:
            cap = self.report.memory_cap.cap_bytes if self.report.memory_cap else 0
            fault = DeviceOutOfMemory(record.step, record.total_runner_rows, cap)
        except Exception as exc:  # a RunnerFault; anything else is a record the runner cannot follow
            fault = exc
        if self._cuda:
            torch.cuda.synchronize(device)
        seconds = time.perf_counter() - start
        described = f"{type(fault).__name__}: {fault}" if fault is not None else None
        self.report.steps.append(StepReport(
            step=record.step, rows=dict(execution.rows if execution else record.runner_rows), capacity=self.limits.max_num_batched_tokens,
            tokens=record.total_scheduled_tokens, kv_blocks=record.kv_blocks_in_use, kv_pool=self.limits.num_kv_blocks,
            seconds=seconds, peak_bytes=torch.cuda.max_memory_allocated(device) if self._cuda else None,
            verified=execution.verified if execution else 0, matched=execution.matched if execution else 0,
            committed=execution.committed if execution else 0, fault=described,
        ))
        return execution, described
