"""FastDeployTarget: FastDeploy's ``ResourceManagerV1`` (``engine.FastDeployEngine``) as a target.

Each engine step becomes the spec's StepRecord and StepOutcome: per request that ran its
grant (a prefill chunk's tokens; a decode's one token, its k drafts riding outside the grant
and ``1 + k`` runner rows), computed tokens before it and its token count; decodes the worker
paused in ``paused``; preemptions in the order ``_trigger_preempt`` made them; queues, blocks in
use and block tables from the scheduler's ``PrefixCacheManager``; ``error`` an exception raised
inside FastDeploy's code (after it the target is dead); ``fingerprint`` the scheduler state
(``progress``'s fixpoint rule). The budget is a local of ``schedule()``: the ledger, initial
budgets, ``progress_possible`` and ``unserved_demand`` are left None. The limits are the
model's for the same config and policy (``physical_need``: FastDeploy's method table).
"""
from __future__ import annotations

from pathlib import Path

from ...model import BudgetConfig, BudgetPolicy, get_policy
from ...model.target import ModelTarget
from ...spec.records import StepRecord
from ...spec.trace import AddOp
from ..engine_target import EngineTarget
from ..observed_step import ObservedStep
from .engine import FastDeployEngine

DEFAULT_POLICY = "fastdeploy-spec-method"


class FastDeployTarget(EngineTarget[ObservedStep]):
    """One deployment of FastDeploy's scheduler for ``cfg`` (whatever the policy: FastDeploy
    runs its own code). Raises FastDeployUnavailable without FastDeploy."""

    engine: FastDeployEngine

    def __init__(self, cfg: BudgetConfig, policy: BudgetPolicy | None = None, path: Path | None = None) -> None:
        self.limits = ModelTarget(cfg, policy or get_policy(DEFAULT_POLICY)).limits
        self.engine = FastDeployEngine(cfg, path)
        self.num_steps = 0

    def add(self, op: AddOp) -> None:
        self.engine.add(op.id, op.prompt_len, op.max_tokens, op.prefix_group, op.prefix_len)

    def record(self, step: int, observed: ObservedStep) -> StepRecord:
        drafts, prefill, grants = observed.scheduled_draft_tokens, observed.prefill, observed.num_scheduled_tokens
        rows = {rid: n if rid in prefill else n + drafts.get(rid, 0) for rid, n in grants.items()}
        return observed.record(step, self.limits, rows)

