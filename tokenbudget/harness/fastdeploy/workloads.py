"""Seeded conformance workloads for FastDeploy at one commit: configs that the commit's policy
and FastDeploy's own startup check accept, and op lists.

``workload(seed, index, commit)`` is a pure function of its arguments. A config: MTP or n-gram
drafting with k = 1..4, blocks of 1, 2, 4, 8, 16 or 64 tokens, max_model_len a multiple of 64 (the
attention backend asserts both at startup, model_executor/layers/attention/append_attn_backend.py:79-80),
the prefix cache off, max_num_seqs 1..6, a pass budget B from S * (k + 1) (the least #7499's
startup check accepts: one workload in four takes it, the full-batch shape of F5) up to
2 * max_model_len, and a KV pool from the least FastDeploy accepts (``max_model_len //
block_size + 2`` blocks, config.py:1705) up, so that preemption happens. Ops:
``conform_workloads.draw_ops`` (adds, steps with the leading accepted drafts, arrivals and
aborts), prompts of at most max_model_len - 2 tokens (FastDeploy takes prompt + min_tokens < max_model_len,
engine.py:307); in most workloads every request's max_tokens is cut so that it finishes before a
decode's writes would pass max_model_len.
"""
from __future__ import annotations

import random
from dataclasses import replace
from typing import Any

from ...model import ConfigError, get_policy
from ...model.config import BudgetConfig
from ...model.fastdeploy.commits import ENC_DEC_BLOCK_NUM, FASTDEPLOY_COMMITS
from ...model.fastdeploy.loop import FastDeployLoop
from ...spec.trace import AddOp, Op, Trace
from ..conform_workloads import draw_ops

METHODS = ("mtp", "ngram")
BLOCK_SIZES = (1, 2, 4, 8, 16, 64)
FULL_BATCH_SHARE = 0.25
SHORT_SHARE = 0.7


def workload(seed: int, index: int, commit: str) -> Trace:
    """Workload ``index`` of the stream ``seed``, as a trace under the policy of ``commit``."""
    row = FASTDEPLOY_COMMITS[commit]
    rng = random.Random(f"tokenbudget-conform-fastdeploy:{seed}:{index}")
    config = draw_config(rng, row.policy, commit)
    cfg = BudgetConfig.from_dict(config)
    longest = FastDeployLoop.longest_prompt(cfg)
    ops = [replace(op, prompt_len=min(op.prompt_len, longest), prefix_len=min(op.prefix_len, longest))
           if isinstance(op, AddOp) else op for op in draw_ops(rng, cfg)]
    if rng.random() < SHORT_SHARE:
        ops = [_short(op, cfg) for op in ops]
    return Trace(policy=row.policy, config=config, ops=tuple(ops),
                 description=f"FastDeploy {commit} conformance workload {index} of seed {seed}",
                 found_by=f"tokenbudget conform --engine fastdeploy --seed {seed} (workload {index})")


def draw_config(rng: random.Random, policy_name: str, commit: str) -> dict[str, Any]:
    """A config ``policy_name`` accepts at ``commit``; only keys that differ from the defaults."""
    policy = get_policy(policy_name)
    for _ in range(10_000):
        k = rng.randint(1, 4)
        block = rng.choice(BLOCK_SIZES)
        max_model_len = rng.choice((64, 128, 192, 256))  # max_model_len % 64 (append_attn_backend.py:80)
        seqs = rng.randint(1, 6)
        floor = seqs * (1 + k)
        batched = floor if rng.random() < FULL_BATCH_SHARE else rng.randint(floor, max(floor, 2 * max_model_len))
        if max_model_len % block:  # the attention backend's startup assert (append_attn_backend.py:79)
            continue
        least = max_model_len // block + ENC_DEC_BLOCK_NUM
        extra = rng.choice((0, 1, 2, 4, 8, 16, max_model_len // block, 4 * max_model_len // block))
        config: dict[str, Any] = {
            "max_num_batched_tokens": batched, "max_num_seqs": seqs, "block_size": block,
            "max_model_len": max_model_len, "num_speculative_tokens": k, "method": rng.choice(METHODS),
            "enable_chunked_prefill": True, "enable_prefix_caching": False, "num_kv_blocks": least + extra,
            "engine_version": commit,
        }
        try:
            policy.validate(BudgetConfig.from_dict(config))
        except ConfigError:
            continue
        return config
    raise ConfigError(f"no config drawn that {policy_name} accepts at {commit}")


def _short(op: Op, cfg: BudgetConfig) -> Op:
    """An add whose request finishes before a decode of 1 + k rows would pass max_model_len."""
    if not isinstance(op, AddOp):
        return op
    room = cfg.max_model_len - op.prompt_len - 2 * cfg.num_speculative_tokens - 2
    return replace(op, max_tokens=max(1, min(op.max_tokens, room)))
