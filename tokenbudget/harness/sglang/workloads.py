"""Seeded conformance workloads for SGLang: configs valid for ``sglang-0.5.23`` and op lists."""
from __future__ import annotations

import random
from typing import Any

from ...model import ConfigError, get_policy
from ...model.config import BudgetConfig
from ...model.sglang.policies import Sglang
from ...spec.trace import AbortOp, AddOp, Op, StepOp, Trace
from ..conform_workloads import draw_ops

POLICY = "sglang-0.5.23"
METHODS = ("eagle3", "ngram")
RETRACT_SHARE = 0.25  # workloads shaped for a decode retraction
SHARE_SHARE = 1 / 3  # of the others: a stream of requests on shared prefixes
PAGE_SIZES = (1, 1, 2, 4)


def workload(seed: int, index: int, policy: str = POLICY, radix: bool = True) -> Trace:
    """Workload ``index`` of the stream ``seed``, as a trace under ``policy``, with SGLang's
    radix cache on or off."""
    rng = random.Random(f"tokenbudget-conform-sglang:{seed}:{index}")
    retract = rng.random() < RETRACT_SHARE
    share = not retract and rng.random() < SHARE_SHARE
    config = draw_config(rng, retract, radix, share)
    cfg = BudgetConfig.from_dict(config)
    ops = _retract_ops(rng, cfg) if retract else _share_ops(rng, cfg) if share else draw_ops(rng, cfg)
    return Trace(policy=policy, config=config, ops=tuple(ops),
                 description=f"SGLang conformance workload {index} of seed {seed}",
                 found_by=f"tokenbudget conform --engine sglang --seed {seed} (workload {index})")


def draw_config(rng: random.Random, retract: bool = False, radix: bool = True,
                share: bool = False) -> dict[str, Any]:
    """A config ``sglang-0.5.23`` accepts; only keys that differ from the defaults. For a
    retraction: 2 to 4 seats and a pool of the least the policy accepts and 0.4 to 0.9 of
    max_model_len for each seat but one; for shared prefixes a pool of the least and at most
    a max_model_len more, so cached pages are evicted."""
    policy = get_policy(POLICY)
    assert isinstance(policy, Sglang)
    while True:
        k = rng.randint(1, 4)
        max_model_len = rng.choice((16, 24, 32, 48, 64))
        seqs = rng.randint(2, 4) if retract else rng.randint(1, 6)
        chunked = rng.random() < 0.8
        floor = max(seqs * (1 + k), 1 if chunked else max_model_len - 1)
        config: dict[str, Any] = {
            "max_num_batched_tokens": rng.randint(floor, max(floor, 2 * max_model_len)),
            "max_num_seqs": seqs, "block_size": rng.choice(PAGE_SIZES), "max_model_len": max_model_len,
            "num_speculative_tokens": k, "method": rng.choice(METHODS),
            "enable_chunked_prefill": chunked, "enable_prefix_caching": radix,
        }
        page = config["block_size"]
        least = -(-policy.min_pool_tokens(BudgetConfig.from_dict({**config, "num_kv_blocks": 10**6})) // page)
        if retract:  # less than the seats' whole lengths, more than the admission estimate's 0.7 of them
            extra = int(rng.uniform(0.4, 0.9) * (seqs - 1) * max_model_len)
        elif share:
            extra = rng.choice((0, 2, 4, 8, 16, max_model_len // 2, max_model_len))
        else:
            extra = rng.choice((0, 1, 2, 4, 8, 16, max_model_len, 4 * max_model_len))
        config["num_kv_blocks"] = least + extra // page
        try:
            policy.validate(BudgetConfig.from_dict(config))
        except ConfigError:
            continue
        return config


def _retract_ops(rng: random.Random, cfg: BudgetConfig) -> list[Op]:
    """As many short-prompt, long-output requests as seats, one arriving every step or two
    (each admitted against the 0.7 estimate of the running ones, not their whole lengths),
    then steps until their decodes outgrow the pool and ``retract_decode`` runs."""
    k, max_len = cfg.num_speculative_tokens, cfg.max_model_len
    ops: list[Op] = []
    names: list[str] = []
    for i in range(cfg.max_num_seqs):
        ops.append(AddOp(id=str(i), prompt_len=rng.randint(1, 3), max_tokens=max_len))
        names.append(str(i))
        for _ in range(rng.randint(1, 2)):
            ops.append(StepOp({rid: a for rid in names if (a := _accepted(rng, k))}))
    for _ in range(rng.randint(24, 48)):
        ops.append(StepOp({rid: a for rid in names if (a := _accepted(rng, k))}))
    return ops


def _share_ops(rng: random.Random, cfg: BudgetConfig) -> list[Op]:
    """Four to sixteen requests on one to three shared prefixes, each its prefix and 0 to a quarter
    of max_model_len of its own, 1 to 16 output tokens, 0 to 2 steps apart (one in twenty
    aborted a step later); then steps until they are done."""
    k, max_len = cfg.num_speculative_tokens, cfg.max_model_len
    prefixes = [rng.randint(max_len // 4, max_len // 2) for _ in range(rng.randint(1, 3))]
    ops: list[Op] = []
    names: list[str] = []
    for i in range(rng.randint(4, 16)):
        group = rng.randrange(len(prefixes))
        own = 0 if rng.random() < 0.3 else rng.randint(1, max(1, max_len // 4))
        prompt = min(prefixes[group] + own, max_len - 1)
        ops.append(AddOp(id=str(i), prompt_len=prompt, max_tokens=rng.randint(1, 16), prefix_group=f"system{group}",
                         prefix_len=min(prefixes[group], prompt)))
        names.append(str(i))
        for _ in range(rng.randint(0, 2)):
            ops.append(StepOp({rid: a for rid in names if (a := _accepted(rng, k))}))
        if rng.random() < 0.05:
            ops.append(AbortOp(id=rng.choice(names)))
    for _ in range(rng.randint(8, 32)):
        ops.append(StepOp({rid: a for rid in names if (a := _accepted(rng, k))}))
    return ops


def _accepted(rng: random.Random, k: int) -> int:
    """The leading successes among k Bernoulli(0.6) trials."""
    n = 0
    while n < k and rng.random() < 0.6:
        n += 1
    return n
