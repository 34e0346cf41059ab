"""The effective budget: the tokens a pass can really hand out with R requests scheduled,
after what the policy charges each of them beyond its tokens (draft slots, reservations)."""
from __future__ import annotations

from ..model import BudgetConfig, BudgetPolicy, ConfigError


def effective_budget(cfg: BudgetConfig, policy: BudgetPolicy, running: int) -> int:
    """The most tokens ``running`` decoding requests can be granted in one pass: each budget
    the policy keeps, less ``running`` times its per-request charge, over its per-token
    charge; the least over the budgets, floored at 0. Raises ConfigError when the policy
    refuses cfg."""
    policy.validate(cfg)
    p = policy.params(cfg)
    start = policy.initial_budgets(p, running)
    one, two = policy.charge(p, 1, True), policy.charge(p, 2, True)
    limits = [_room(start.token, one.token, two.token, running)]
    if start.input is not None:
        limits.append(_room(start.input, one.input or 0, two.input or 0, running))
    return max(0, min(int(x) for x in limits if x is not None))


def _room(budget: int, charge_one: int, charge_two: int, running: int) -> int | None:
    """Tokens left in ``budget`` after ``running`` fixed charges (None: tokens do not spend it)."""
    per_token = charge_two - charge_one
    fixed = charge_one - per_token
    if per_token <= 0:
        return None if budget - running * fixed >= 0 else 0
    return (budget - running * fixed) // per_token


def config_for(cfg: BudgetConfig, policy: BudgetPolicy) -> BudgetConfig:
    """cfg, its engine_version dropped where the policy does not model it (its newest then)."""
    if cfg.engine_version is not None and cfg.engine_version not in policy.versions:
        return cfg.replace(engine_version=None)
    return cfg


def budgets_by_policy(cfg: BudgetConfig, policies: dict[str, BudgetPolicy], running: tuple[int, ...]) -> dict:
    """Per policy: ``{"budget": {R: tokens}}``, or ``{"refused": why}`` where it refuses cfg."""
    out: dict[str, dict] = {}
    for name, policy in policies.items():
        try:
            own = config_for(cfg, policy)
            out[name] = {"budget": {str(r): effective_budget(own, policy, r) for r in running},
                         "engine_version": own.engine_version}
        except ConfigError as e:
            out[name] = {"refused": str(e)}
    return out
