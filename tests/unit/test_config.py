"""BudgetConfig and a policy's validation refuse bad knobs with messages that name the knob."""
from __future__ import annotations

import pytest

from tokenbudget.model import BudgetConfig, ConfigError, get_policy


@pytest.mark.parametrize(
    "knobs, knob",
    [
        ({"max_num_batched_tokens": 0}, "max_num_batched_tokens"),
        ({"max_num_seqs": True}, "max_num_seqs"),
        ({"num_speculative_tokens": 2}, "method"),
        ({"method": "ngram"}, "num_speculative_tokens"),
        ({"num_speculative_tokens": 2, "method": "medusa"}, "method"),
        ({"parallel_drafting": True}, "parallel_drafting"),
        ({"scheduling_policy": "lifo"}, "scheduling_policy"),
        ({"long_prefill_token_threshold": -1}, "long_prefill_token_threshold"),
        ({"long_prefill_token_threshold": 9000}, "long_prefill_token_threshold"),
        ({"num_kv_blocks": 10}, "num_kv_blocks"),
        ({"enable_prefix_caching": 1}, "enable_prefix_caching"),
        ({"max_num_scheduled_tokens": 0}, "max_num_scheduled_tokens"),
    ],
)
def test_bad_knob_is_named(knobs, knob):
    with pytest.raises(ConfigError, match=knob):  # structural knobs at construction, the others in validate
        get_policy("vllm-adaptive").validate(BudgetConfig(**knobs))


def test_from_dict_rejects_unknown_keys():
    with pytest.raises(ConfigError, match="unknown config key 'max_batch'"):
        BudgetConfig.from_dict({"max_batch": 3})


def test_round_trip_and_replace():
    cfg = BudgetConfig(num_speculative_tokens=3, method="mtp")
    assert BudgetConfig.from_dict(cfg.to_dict()) == cfg
    assert cfg.replace(max_num_seqs=8).max_num_seqs == 8
    assert cfg.spec_enabled and not BudgetConfig().spec_enabled
