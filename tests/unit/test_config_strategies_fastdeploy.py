"""FastDeploy configs are drawn from FastDeploy's knobs only: no long-prefill threshold,
no user T, FCFS, no parallel drafting, max_model_len >= 16."""
from __future__ import annotations

import pytest
from hypothesis import HealthCheck, Phase, given, settings

from tokenbudget.fuzz.config_strategies import candidate_configs, config_space
from tokenbudget.model import BudgetConfig, builtin_policies, get_policy

FASTDEPLOY = [name for name, cls in builtin_policies().items() if cls.engine == "fastdeploy"]


@pytest.mark.parametrize("policy", FASTDEPLOY)
def test_the_space_has_only_fastdeploy_knobs(policy: str) -> None:
    space = config_space(get_policy(policy))
    assert not space.long_prefill_threshold and not space.max_num_scheduled_tokens and not space.parallel_drafting
    assert space.scheduling_policies == ("fcfs",)
    if get_policy(policy).versions:  # drawn as the newest modelled commit starts: max_model_len % 64, // block + 2
        assert (space.min_model_len, space.model_len_multiple, space.pool_spare_blocks) == (64, 64, 2)
    else:  # no commit modelled (SPEC.md §5): FDConfig.check's max_model_len >= 16, on the block grid (16 here)
        assert (space.min_model_len, space.model_len_multiple, space.pool_spare_blocks) == (16, 16, 0)


@pytest.mark.parametrize("policy", FASTDEPLOY)
def test_draws_leave_the_threshold_off(policy: str) -> None:
    seen: list[BudgetConfig] = []

    @settings(settings.get_profile("default"), derandomize=True, database=None, max_examples=60,
              phases=[Phase.generate], suppress_health_check=[HealthCheck.too_slow])
    @given(candidate_configs(get_policy(policy)))
    def draw(cfg: BudgetConfig) -> None:
        seen.append(cfg)

    draw()
    assert seen and all(c.long_prefill_token_threshold == 0 and c.max_model_len >= 16 for c in seen)


def test_vllm_draws_still_set_the_threshold() -> None:
    assert config_space(get_policy("vllm-adaptive")).long_prefill_threshold
