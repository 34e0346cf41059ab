"""VllmTarget: the real vLLM scheduler (whichever is importable) as a fuzz and replay target."""
from __future__ import annotations


from dataclasses import replace

from ...model import BudgetConfig, BudgetPolicy, ConfigError
from ...model.config import PolicyNotRunnable
from ...model.physical_need import physical_need
from ...spec.records import StepRecord
from ...spec.trace import AddOp
from ..engine_target import EngineTarget
from .async_runner import AsyncVllmEngine, deploys_async
from .engine import EngineVersion, VllmEngine, VllmStep, engine_version
from .speculative import TranslationRefused

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
            raise PolicyNotRunnable(f"the vllm target cannot run {policy.name}: it runs vLLM's scheduler, whose "
                                    f"accounting is {' or '.join(VLLM_POLICIES)}'s; replay this trace with "
                                    "--target model")
        if cfg.num_kv_blocks > MAX_VLLM_KV_BLOCKS:
            raise ConfigError(f"num_kv_blocks {cfg.num_kv_blocks} is more than the vllm target builds "
                              f"({MAX_VLLM_KV_BLOCKS}): vLLM's block pool makes every block up front, about "
                              f"{VLLM_BYTES_PER_BLOCK} bytes each; lower num_kv_blocks or replay with --target model")
        if cfg.engine_version is None:  # the trace names no version: the one of the vLLM driven
            cfg = cfg.replace(engine_version=engine_version().model_version)
        deployed_async = deploys_async(cfg.method, cfg.async_scheduling)
        if cfg.async_scheduling != deployed_async:
            cfg = cfg.replace(async_scheduling=deployed_async)
        if validate:
            policy.validate(cfg)
        self.cfg = cfg
        deployed = cfg
        if policy.name == STATIC_POLICY and cfg.max_num_scheduled_tokens is None:
            # T = B - d * S set up front, as vLLM <= 0.27 derived it: vLLM's own accounting is then that policy's
            deployed = cfg.replace(max_num_scheduled_tokens=int(policy.token_cap(policy.params(cfg))))
        try:
            self.engine = (AsyncVllmEngine if cfg.async_scheduling else VllmEngine)(deployed)
        except ValueError as exc:  # the model accepted cfg: vLLM refuses our translation of it, not the user's input
            version = engine_version()
            raise TranslationRefused(f"vLLM {version.release} refuses tokenbudget's translation of this config, which "
                                     f"the model of vLLM {cfg.engine_version} accepts: {' '.join(str(exc).split())}; "
                                     "tokenbudget cannot run it on this vLLM: report this line") from None
        self.version: EngineVersion = self.engine.version
        # d and L from our method table at the release driven (a trace of another version runs on this runner),
        # never from the vLLM under test
        need = physical_need(policy, cfg.replace(engine_version=self.version.model_version))
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
