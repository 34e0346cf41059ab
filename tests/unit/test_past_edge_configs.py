"""Configs past a shared requirement: drawn only for a policy whose validation lets one through."""
from __future__ import annotations

from hypothesis import HealthCheck, given, settings

from tokenbudget.fuzz.config_strategies import config_space
from tokenbudget.fuzz.past_edge_configs import past_edge_configs
from tokenbudget.model import BudgetConfig, get_policy
from tokenbudget.model.config_edges import validates
from tokenbudget.model.vllm.policies import VllmAdaptive


class NoTokenBudgetCheck(VllmAdaptive):
    name = "no-token-budget-check"

    def shared_requirements(self, c):
        return [r for r in super().shared_requirements(c) if r.name != "max_num_scheduled_tokens-positive"]

    def requirements(self, p):
        return [r for r in super().requirements(p) if r.name != "token-cap-positive"]


def test_a_policy_that_keeps_every_shared_requirement_draws_nothing() -> None:
    for name in ("vllm-adaptive", "sglang-0.5.23", "trtllm", "fastdeploy-spec-method"):
        policy = get_policy(name)
        assert past_edge_configs(policy, config_space(policy)).is_empty


def test_a_dropped_requirement_is_fuzzed_past_its_edge() -> None:
    policy = NoTokenBudgetCheck()
    drawn: list[BudgetConfig] = []

    @settings(suppress_health_check=list(HealthCheck), max_examples=30, database=None)
    @given(past_edge_configs(policy, config_space(policy)))
    def draw(cfg: BudgetConfig) -> None:
        assert validates(policy, cfg)
        drawn.append(cfg)

    draw()
    assert drawn and all(cfg.max_num_scheduled_tokens is not None and cfg.max_num_scheduled_tokens < 0
                         for cfg in drawn)
