"""The edges of what a policy accepts: whether it validates a config, and, by bisection, the
largest value of a knob it still accepts and the least KV pool. Validation is monotone in
the knobs searched (more sequences and a smaller pool only ever add refusals)."""
from __future__ import annotations

from typing import Callable

from .config import BudgetConfig, ConfigError
from .policy import BudgetPolicy


def validates(policy: BudgetPolicy, cfg: BudgetConfig) -> bool:
    """Whether ``policy.validate`` accepts cfg."""
    try:
        policy.validate(cfg)
    except ConfigError:
        return False
    return True


def largest_accepted(accepts: Callable[[int], bool], lo: int, hi: int) -> int:
    """The largest n in [lo, hi] with ``accepts(n)``; ``accepts(lo)`` must hold and
    acceptance must not come back once lost."""
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if accepts(mid):
            lo = mid
        else:
            hi = mid - 1
    return lo


def least_pool(policy: BudgetPolicy, cfg: BudgetConfig) -> int:
    """The fewest KV blocks the policy accepts for cfg, which it must accept."""
    assert validates(policy, cfg), "least_pool starts from an accepted config"
    return -largest_accepted(lambda b: validates(policy, cfg.replace(num_kv_blocks=-b)), -cfg.num_kv_blocks, -1)
