"""A real engine's target that cannot run a policy at all: replay says so, bad input, never
"refuses the config" (no config would do)."""
from __future__ import annotations

from pathlib import Path

import pytest

from tokenbudget.harness.vllm.target import VllmTarget
from tokenbudget.model.replay import BadInput, replay_on_model
from tokenbudget.spec.trace import load_trace

TRACE = Path(__file__).resolve().parents[2] / "tokenbudget" / "corpus" / "seed-000-vllm-adaptive-dflash-0.32.json"


def test_a_user_policy_on_the_vllm_target_is_not_runnable_there() -> None:
    with pytest.raises(BadInput) as refused:
        replay_on_model(load_trace(TRACE), "fastdeploy-v0", VllmTarget)
    message = str(refused.value)
    assert "the vllm target cannot run fastdeploy-v0" in message and "--target model" in message
    assert "refuses the config" not in message
