"""SglangTarget: SGLang 0.5.23's scheduler code (``engine.SglangEngine``) as a lockstep target.

Each engine step becomes the spec's StepRecord and StepOutcome: per scheduled request its
grant (a prefill's extend, a decode's ``num_draft_tokens = 1 + k`` verify rows, k of them
drafts), computed tokens before it and its token count; preemptions are ``retract_decode``'s
retracted requests in retraction order; queues, pages in use and block tables from SGLang's
allocator and req-to-token pool; ``error`` an exception raised inside SGLang's code or an
allocation that failed (after it the target is dead). The ledger, initial budgets,
``progress_possible`` and ``unserved_demand`` are left None (SGLang's budgets are locals of
``PrefillAdder``), so the spec does not judge them here. Limits: B = max_prefill_tokens =
chunked_prefill_size, S = max_running_requests, no draft slots or lookahead (the verify rows
are the grant), the req_to_token rows' headroom past the context length (``context_headroom``).
"""
from __future__ import annotations

from pathlib import Path

from ...model import BudgetConfig, BudgetPolicy, ConfigError
from ...model.sglang.loop import context_headroom
from ...spec.records import StepLimits, StepRecord
from ...spec.trace import AddOp
from ..engine_target import EngineTarget
from ..observed_step import ObservedStep
from .engine import SglangEngine


class SglangTarget(EngineTarget[ObservedStep]):
    """One deployment of SGLang's scheduler for ``cfg`` (whatever the policy: SGLang runs its
    own code). Raises SglangUnavailable without SGLang."""

    engine: SglangEngine

    def __init__(self, cfg: BudgetConfig, policy: BudgetPolicy | None = None, path: Path | None = None) -> None:
        if not cfg.num_speculative_tokens:  # SGLang's decode without it allocates one token a step (alloc_for_decode)
            raise ConfigError("the SGLang target drives speculative decoding (EAGLE's verify rows and their "
                              "reservation); set num_speculative_tokens >= 1")
        self.engine = SglangEngine(cfg, path)
        self.limits = StepLimits(
            max_num_batched_tokens=cfg.max_num_batched_tokens, max_num_scheduled_tokens=cfg.max_num_batched_tokens,
            max_num_seqs=cfg.max_num_seqs, num_speculative_tokens=cfg.num_speculative_tokens, draft_slots=0,
            lookahead=0, max_model_len=cfg.max_model_len, block_size=cfg.block_size, num_kv_blocks=cfg.num_kv_blocks,
            context_headroom=context_headroom(cfg),
        )
        self.num_steps = 0

    def add(self, op: AddOp) -> None:
        self.engine.add(op.id, op.prompt_len, op.max_tokens, op.prefix_group, op.prefix_len)

    def record(self, step: int, observed: ObservedStep) -> StepRecord:
        return observed.record(step, self.limits, observed.num_scheduled_tokens)  # the verify rows are the grant
