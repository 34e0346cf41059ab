"""The ops of a seeded conformance workload, shared by every engine's workloads
(``harness/<engine>/workloads.py`` draw the configs): a few requests up front and more
arriving later, some on shared prefixes (two prefix groups), steps with leading accepted
drafts, and aborts."""
from __future__ import annotations

import random
from dataclasses import replace

from ..model.config import BudgetConfig
from ..spec.trace import AbortOp, AddOp, Op, StepOp

GROUPS = ("sys", "tools")


def draw_ops(rng: random.Random, cfg: BudgetConfig) -> list[Op]:
    """Adds, steps with accepted drafts, aborts: a few requests up front, more arriving later."""
    k, max_len = cfg.num_speculative_tokens, cfg.max_model_len
    num_requests = rng.randint(1, 10)
    num_steps = rng.randint(8, 48)
    adds = [_draw_add(rng, str(i), max_len) for i in range(num_requests)]
    if cfg.scheduling_policy == "priority":
        # Often, later arrivals are more urgent: a running request scheduled earlier in the
        # pass is then the victim of a later one's KV need (a same-step refund).
        urgent_late = rng.random() < 0.5
        adds = [replace(a, priority=num_requests - i if urgent_late else rng.randint(0, 3))
                for i, a in enumerate(adds)]
    upfront = rng.randint(1, num_requests)
    ops: list[Op] = list(adds[:upfront])
    pending, added = adds[upfront:], [a.id for a in adds[:upfront]]
    for _ in range(num_steps):
        accepted = {rid: n for rid in added if (n := leading_successes(rng, k, 0.6))}
        ops.append(StepOp(accepted))
        if pending and rng.random() < 0.3:
            add = pending.pop(0)
            ops.append(add)
            added.append(add.id)
        if rng.random() < 0.04:
            ops.append(AbortOp(rng.choice(added)))
    return ops


def _draw_add(rng: random.Random, rid: str, max_len: int) -> AddOp:
    roll = rng.random()
    if roll < 0.15:
        prompt_len = 1
    elif roll < 0.85:
        prompt_len = rng.randint(2, max(2, max_len // 2))
    else:
        prompt_len = rng.randint(max_len // 2, max_len - 1)
    max_tokens = rng.randint(1, 12) if rng.random() < 0.8 else rng.randint(12, max_len)
    group, prefix_len = None, 0
    if rng.random() < 0.6:
        group = GROUPS[0] if rng.random() < 0.7 else GROUPS[1]
        prefix_len = prompt_len if rng.random() < 0.3 else rng.randint(1, prompt_len)
    return AddOp(id=rid, prompt_len=prompt_len, max_tokens=max_tokens, prefix_group=group, prefix_len=prefix_len)


def leading_successes(rng: random.Random, k: int, p: float) -> int:
    """Accepted drafts: the leading successes among k Bernoulli(p) trials."""
    n = 0
    while n < k and rng.random() < p:
        n += 1
    return n
