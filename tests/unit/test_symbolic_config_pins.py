"""A config pinned whole (config-complete judges one refused config) pins its token cap too."""
import pytest
import z3

from tokenbudget.model.registry import get_policy
from tokenbudget.proofs.symbolic import SymbolicConfig


@pytest.mark.parametrize("scheduled_tokens_set", [False, True])
@pytest.mark.parametrize("pinned", [None, 5])
def test_a_pinned_token_cap_is_what_the_config_says(scheduled_tokens_set, pinned):
    sc = SymbolicConfig(get_policy("vllm-adaptive"), scheduled_tokens_set, fixed={"max_num_scheduled_tokens": pinned})
    assert sc.knobs["max_num_scheduled_tokens"] == pinned


def test_an_unpinned_token_cap_is_free_only_when_set():
    policy = get_policy("vllm-adaptive")
    assert SymbolicConfig(policy, False).knobs["max_num_scheduled_tokens"] is None
    assert isinstance(SymbolicConfig(policy, True).knobs["max_num_scheduled_tokens"], z3.ArithRef)
