"""vLLM's seeded conformance workloads: random configs and op lists, as traces under ``vllm-adaptive``."""
from __future__ import annotations

import random
from typing import Any

from ...model import ConfigError, get_policy
from ...model.config import BudgetConfig
from ...spec.intlike import cdiv
from ...model.methods import VLLM_0_32
from ...model.vllm.versions import NEWEST
from ...spec.trace import AddOp, Op, StepOp, Trace
from ..conform_workloads import draw_ops, leading_successes

POLICY = "vllm-adaptive"
METHODS: tuple[str, ...] = tuple(sorted(VLLM_0_32))
REFUND_SHARE = 0.2  # workloads shaped for a same-step refund


def workload(seed: int, index: int, version: str = NEWEST) -> Trace:
    """Workload ``index`` of the stream ``seed`` for vLLM ``version``: a config and ops, as a trace."""
    rng = random.Random(f"tokenbudget-conform:{seed}:{index}")
    refund = rng.random() < REFUND_SHARE
    config = draw_config(rng, version, refund)
    cfg = BudgetConfig.from_dict(config)
    return Trace(
        policy=POLICY,
        config=config,
        ops=tuple(_refund_ops(rng, cfg) if refund else draw_ops(rng, cfg)),
        description=f"conformance workload {index} of seed {seed}",
        found_by=f"tokenbudget conform --seed {seed} (workload {index})",
    )


def draw_config(rng: random.Random, version: str = NEWEST, refund: bool = False) -> dict[str, Any]:
    """A config accepted by ``vllm-adaptive`` at ``version`` and by that vLLM; only keys that
    differ from the defaults, and the version."""
    policy = get_policy(POLICY)
    while True:
        config = {**(_refund_candidate(rng) if refund else _config_candidate(rng)), "engine_version": version}
        try:
            policy.validate(BudgetConfig.from_dict(config))
        except ConfigError:
            continue
        return config


def _config_candidate(rng: random.Random) -> dict[str, Any]:
    k = 0 if rng.random() < 0.15 else rng.randint(1, 5)
    method = rng.choice(METHODS) if k else None
    block_size = rng.choice((2, 4, 8, 16))
    max_model_len = rng.choice((16, 24, 32, 48, 64, 96, 128))
    chunked = rng.random() < 0.85
    max_num_seqs = rng.randint(1, 8)
    floor = max(max_num_seqs, 2 * k + 2, 1 if chunked else max_model_len)
    batched = rng.randint(floor, max(floor, 2 * max_model_len if chunked else 2 * floor))
    config: dict[str, Any] = {
        "max_num_batched_tokens": batched,
        "max_num_seqs": max_num_seqs,
        "block_size": block_size,
        "max_model_len": max_model_len,
        "num_kv_blocks": cdiv(max_model_len, block_size) + rng.choice((0, 1, 2, 3, 4, 6, 8, 12, 64)),
        "enable_chunked_prefill": chunked,
        "enable_prefix_caching": rng.random() < 0.7,
        "scheduling_policy": rng.choice(("fcfs", "priority")),
    }
    if k:
        config.update(num_speculative_tokens=k, method=method, parallel_drafting=rng.random() < 0.5)
    if rng.random() < 0.35:
        config["long_prefill_token_threshold"] = rng.randint(1, max_model_len // 2)
    if chunked and rng.random() < 0.15:
        config["max_num_scheduled_tokens"] = rng.randint(1, batched)
    return config


def _refund_candidate(rng: random.Random) -> dict[str, Any]:
    """PRIORITY scheduling, small blocks and a pool of about one max_model_len: decodes
    outgrow it, and the victim is often a request already granted in the same pass."""
    config = _config_candidate(rng)
    block_size = rng.choice((2, 4))
    max_model_len = config["max_model_len"]
    config.update(scheduling_policy="priority", block_size=block_size, enable_chunked_prefill=True,
                  num_kv_blocks=cdiv(max_model_len, block_size) + rng.choice((0, 1, 2)),
                  max_num_seqs=max(2, config["max_num_seqs"]),
                  max_num_batched_tokens=max(config["max_num_batched_tokens"], max_model_len))
    config.pop("max_num_scheduled_tokens", None)
    return config


def _refund_ops(rng: random.Random, cfg: BudgetConfig) -> list[Op]:
    """Two to four requests with short prompts and long outputs, each more urgent than the
    one before and arriving a step or two after it (so the least urgent runs first in the
    running queue: the waiting queue would otherwise admit the most urgent first); then
    steps until the pool is outgrown."""
    k, max_len = cfg.num_speculative_tokens, cfg.max_model_len
    n = rng.randint(2, min(4, cfg.max_num_seqs))
    ops: list[Op] = []
    for i in range(n):
        ops.append(AddOp(id=str(i), prompt_len=rng.randint(1, max(1, max_len // (2 * n))), max_tokens=max_len,
                         priority=n - i))
        ops += [StepOp({})] * rng.randint(1, 2)
    for _ in range(rng.randint(16, 40)):
        ops.append(StepOp({str(i): a for i in range(n) if (a := leading_successes(rng, k, 0.6))}))
    return ops
