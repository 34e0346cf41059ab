"""TrtllmTarget: TensorRT-LLM's schedulers (``engine.TrtllmEngine``) as a lockstep target.

Each iteration becomes the spec's StepRecord and StepOutcome: per scheduled request its grant (a
context chunk's tokens; a generation request's one token, its drafts riding outside the grant),
the drafts it was charged (``num_draft_tokens`` when the micro-batch scheduler ran), its runner
rows (a chunk's tokens; ``1 + k`` for a generation request, the forward's ``1 + runtime_draft_len``,
whatever was charged), computed tokens before it and its token count; paused requests as
preemptions, in pause order; queues, blocks in use and block tables from the KV manager; ``error``
an exception raised inside TensorRT-LLM's code or a KV block that was not there. The budgets are
locals of ``schedule()``: the ledger, initial budgets, ``progress_possible`` and ``unserved_demand``
are left None. The limits and L are the model's for the same config and policy (``physical_need``:
TensorRT-LLM's method table); the policy says whether the stamp covers one-model speculation.
"""
from __future__ import annotations

from pathlib import Path

from ...model import BudgetConfig, BudgetPolicy, ConfigError, get_policy
from ...model.target import ModelTarget
from ...spec.records import StepRecord
from ...spec.trace import AddOp
from ..engine_target import EngineTarget
from ...model.trtllm.deployments import capacity_of
from .engine import Deployment, TrtllmEngine, TrtllmStep

DEFAULT_POLICY = "trtllm"


class TrtllmTarget(EngineTarget[TrtllmStep]):
    """One deployment of TensorRT-LLM's scheduler for ``cfg`` under ``capacity``, by default the one
    ``cfg.engine_version`` names (``model.trtllm.deployments``; whatever the policy: TensorRT-LLM runs
    its own code, the policy picks the stamp). Raises TrtllmUnavailable without scheduler.py."""

    engine: TrtllmEngine

    def __init__(self, cfg: BudgetConfig, policy: BudgetPolicy | None = None, path: Path | None = None,
                 capacity: str | None = None) -> None:
        if cfg.enable_prefix_caching:
            raise ConfigError("the trtllm target runs TensorRT-LLM without KV block reuse (its prefix-aware scheduling "
                              "reads the C++ radix tree, which no stand-in has); set enable_prefix_caching=false")
        policy = policy or get_policy(DEFAULT_POLICY)
        self.limits = ModelTarget(cfg, policy, validate=False).limits
        deployment = Deployment(capacity=capacity or capacity_of(cfg.engine_version),
                                stamps_one_model=getattr(policy, "stamps_one_model", True),
                                lookahead=self.limits.lookahead)
        self.engine = TrtllmEngine(cfg, deployment, path)
        self.num_steps = 0

    def add(self, op: AddOp) -> None:
        self.engine.add(op.id, op.prompt_len, op.max_tokens)

    def record(self, step: int, observed: TrtllmStep) -> StepRecord:
        return observed.record(step, self.limits, observed.runner_rows)
