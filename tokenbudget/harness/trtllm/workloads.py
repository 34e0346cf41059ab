"""Seeded conformance workloads for TensorRT-LLM under one capacity policy: configs that the
model's ``trtllm`` policy accepts, and op lists.

``workload(seed, index, capacity)`` is a pure function of its arguments. A config: MTP, Eagle3
(one-model), draft-model or n-gram drafting with k = 1..4; blocks of 1 to 32 tokens (the chunk
unit); max_num_seqs 1..6; max_num_tokens B from S * (1 + k) (the model's scope: every generation
request fits one step; one workload in four takes it) up to 2 * max_model_len; chunked prefill on
in three workloads of four (off: B >= max_model_len - 1, as TensorRT-LLM refuses a longer prompt);
prefix reuse off; ``engine_version`` the deployment of the capacity policy. The KV pool: under
GUARANTEED_NO_EVICT and MAX_UTILIZATION from the blocks of one sequence up, so the capacity policy decides; under MAX_REQUESTS (no KV manager in the
scheduler) one that holds every request whole. Ops: ``conform_workloads.draw_ops``.
"""
from __future__ import annotations

import random
from typing import Any

from ...model import ConfigError, get_policy
from ...model.config import BudgetConfig
from ...spec.intlike import cdiv
from ...spec.trace import Trace
from ..conform_workloads import draw_ops
from ...model.trtllm.deployments import MAX_REQUESTS, deployment_of

POLICY = "trtllm"
METHODS = ("mtp", "eagle3", "draft_model", "ngram")
BLOCK_SIZES = (1, 2, 4, 8, 16, 32)
FULL_BATCH_SHARE = 0.25
UNCHUNKED_SHARE = 0.25


def workload(seed: int, index: int, capacity: str, policy: str = POLICY) -> Trace:
    """Workload ``index`` of the stream ``seed`` under ``capacity``, as a trace of ``policy``."""
    rng = random.Random(f"tokenbudget-conform-trtllm:{capacity}:{seed}:{index}")
    config = draw_config(rng, capacity, policy)
    ops = draw_ops(rng, BudgetConfig.from_dict(config))
    return Trace(policy=policy, config=config, ops=tuple(ops),
                 description=f"TensorRT-LLM conformance workload {index} of seed {seed} under {capacity}",
                 found_by=f"tokenbudget conform --engine trtllm --capacity-policy {capacity} --seed {seed} "
                          f"(workload {index})")


def draw_config(rng: random.Random, capacity: str, policy_name: str = POLICY) -> dict[str, Any]:
    """A config ``policy_name`` accepts; only keys that differ from the defaults."""
    policy = get_policy(policy_name)
    for _ in range(10_000):
        k = rng.randint(1, 4)
        block = rng.choice(BLOCK_SIZES)
        max_model_len = rng.choice((16, 24, 32, 48, 64, 128))
        seqs = rng.randint(1, 6)
        floor = seqs * (1 + k)
        chunked = rng.random() >= UNCHUNKED_SHARE
        if not chunked:
            floor = max(floor, max_model_len - 1)
        batched = floor if rng.random() < FULL_BATCH_SHARE else rng.randint(floor, max(floor, 2 * max_model_len))
        whole = cdiv(max_model_len + 2 * k, block)  # a sequence, its drafts and the drafter's KV
        if capacity == MAX_REQUESTS:
            blocks = seqs * whole
        else:
            blocks = whole + rng.choice((0, 1, 2, 4, 8, 16, whole, 4 * whole))
        config: dict[str, Any] = {
            "max_num_batched_tokens": batched, "max_num_seqs": seqs, "block_size": block,
            "max_model_len": max_model_len, "num_speculative_tokens": k, "method": rng.choice(METHODS),
            "enable_chunked_prefill": chunked, "enable_prefix_caching": False, "num_kv_blocks": blocks,
            "engine_version": deployment_of(capacity),
        }
        try:
            policy.validate(BudgetConfig.from_dict(config))
        except ConfigError:
            continue
        return config
    raise ConfigError(f"no config drawn that {policy_name} accepts under {capacity}")
