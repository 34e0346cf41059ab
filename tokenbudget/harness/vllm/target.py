"""VllmTarget: the real vLLM scheduler (whichever is importable) as a fuzz and replay target.

It wraps ``VllmEngine`` (vLLM's own ``Scheduler``, KV cache manager and block pool on a
fake model; see ``tokenbudget/harness/vllm/engine.py``), whose steps ``tokenbudget/harness/vllm/observe.py`` turns
into the spec's StepRecord and StepOutcome, as it does for the runtime monitor.

What a record holds, and where it comes from:

* limits: read from vLLM after its config validation — B, T (the scheduler's
  ``max_num_scheduled_tokens``), S, k, ``max_model_len``, block size and usable pool size;
  the physical d and L from our method table (``model.physical_need``), never from the vLLM
  under test (a slip in its draft-slot count would hide in its own numbers); vLLM's
  ``num_lookahead_tokens`` is the lookahead it reserves (``reserved_lookahead``);
* per scheduled request: the grant and scheduled drafts from the ``SchedulerOutput``;
  ``runner_rows`` = grant + d (the table's d), the rows vLLM's model runner occupies for it (its target
  tokens plus the drafter's slots); computed tokens before the grant and the token count
  from vLLM's ``Request``; the prefill set is the requests with more than one token left;
* padded requests, preemptions (in order), queues, blocks in use, block tables and the
  hashes of shared blocks, all from vLLM's scheduler and KV cache manager;
* ``error``: an exception raised inside vLLM's ``schedule()`` or ``update_from_output``,
  as ``"Type: message (file:line)"``; after it the target is dead.

``progress_possible`` is read from the live state before each pass with the model's
admission rule (``observe.progress_possible``), so the step half of ``progress`` is judged.
What vLLM cannot expose is left None, so the spec does not judge it: the ledger and the
initial budgets (vLLM's budgets are locals of ``schedule()``) and ``unserved_demand``.
Hence ``input-budget-nonnegative``, ``exact-refund`` and ``work-conserving`` are not
judged on this target; vLLM's own ``assert input_budget >= 0`` at the end of the pass
still fires as an ``error``.

The policy must be ``vllm-adaptive`` or ``vllm-static``: vLLM runs its own accounting,
which is ``vllm-adaptive``; under ``vllm-static`` it is deployed with the token budget that
policy derives up front (T = B - d * S, as vLLM <= 0.27 did), under which vLLM's input
budget never binds before its token budget, and the version must be one that policy models
(0.32). Traces written for another policy cannot run on it. ``version`` is the vLLM release
driven and the modelled version nearest to it (``engine.EngineVersion``).
"""
from __future__ import annotations


from dataclasses import replace

from ...model import BudgetConfig, BudgetPolicy, ConfigError
from ...model.physical_need import physical_need
from ...spec.records import StepRecord
from ...spec.trace import AddOp
from ..engine_target import EngineTarget
from .async_runner import AsyncVllmEngine, deploys_async
from .engine import EngineVersion, VllmEngine, VllmStep, engine_version

VLLM_POLICY, STATIC_POLICY = "vllm-adaptive", "vllm-static"
VLLM_POLICIES = (VLLM_POLICY, STATIC_POLICY)
# vLLM's BlockPool (vllm/v1/core/block_pool.py, 0.32) makes a KVCacheBlock object per block
# when it is built: 2^20 blocks added 140 MiB here, 10^8 took 7.2 GB. The target refuses more.
MAX_VLLM_KV_BLOCKS = 2**20
VLLM_BYTES_PER_BLOCK = 140


class VllmTarget(EngineTarget[VllmStep]):
    """One deployment of vLLM's scheduler, validated at the config's ``engine_version`` (none:
    the modelled version of the vLLM driven). Construction raises EngineUnavailable without
    vLLM, and ConfigError (one line) for another policy than those two, a config
    the policy refuses (when ``validate``), a pool larger than MAX_VLLM_KV_BLOCKS (before
    vLLM is imported), or one vLLM's own config checks refuse."""

    engine: VllmEngine

    def __init__(self, cfg: BudgetConfig, policy: BudgetPolicy, validate: bool = True) -> None:
        if policy.name not in VLLM_POLICIES:
            raise ConfigError(f"the vllm target runs vLLM's scheduler, whose accounting is {' or '.join(VLLM_POLICIES)}"
                              f"'s, not {policy.name}'s; replay this trace with --target model")
        if cfg.num_kv_blocks > MAX_VLLM_KV_BLOCKS:
            raise ConfigError(f"num_kv_blocks {cfg.num_kv_blocks} is more than the vllm target builds "
                              f"({MAX_VLLM_KV_BLOCKS}): vLLM's block pool makes every block up front, about "
                              f"{VLLM_BYTES_PER_BLOCK} bytes each; lower num_kv_blocks or replay with --target model")
        if cfg.engine_version is None:  # the trace names no version: the one of the vLLM driven
            cfg = cfg.replace(engine_version=engine_version().model_version)
        if cfg.async_scheduling != deploys_async(cfg.method):
            cfg = cfg.replace(async_scheduling=deploys_async(cfg.method))
        if validate:
            policy.validate(cfg)
        self.cfg = cfg
        deployed = cfg
        if policy.name == STATIC_POLICY and cfg.max_num_scheduled_tokens is None:
            # T = B - d * S set up front, as vLLM <= 0.27 derived it: vLLM's own accounting is then that policy's
            deployed = cfg.replace(max_num_scheduled_tokens=int(policy.token_cap(policy.params(cfg))))
        try:
            self.engine = (AsyncVllmEngine if cfg.async_scheduling else VllmEngine)(deployed)
        except ValueError as exc:
            raise ConfigError(f"vLLM refuses the config: {' '.join(str(exc).split())}") from None
        self.version: EngineVersion = self.engine.version
        need = physical_need(policy, cfg)  # d and L from our method table, never from the vLLM under test
        observed = self.engine.limits
        self.limits = self.engine.limits = replace(observed, draft_slots=int(need.draft_slots),
                                                   lookahead=int(need.lookahead),
                                                   reserved_lookahead=observed.lookahead)
        self.num_steps = 0

    def add(self, op: AddOp) -> None:
        self.engine.add(op.id, op.prompt_len, op.max_tokens, op.priority, op.prefix_group, op.prefix_len)

    def record(self, step: int, observed: VllmStep) -> StepRecord:
        assert observed.record.step == step, (observed.record.step, step)
        return observed.record
