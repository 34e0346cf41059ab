"""vLLM 0.33: a stop that cuts output tokens takes them off the computed count, so the blocks
cached at that output end before the cut (SPEC.md §8, "A stop cuts the computed count too")."""
from __future__ import annotations

from pathlib import Path

import pytest

from tokenbudget.model import BudgetConfig, get_policy, scheduler_for
from tokenbudget.model.replay import replay_on_model
from tokenbudget.spec.trace import load_trace

TRACE = Path(__file__).resolve().parents[2] / "tokenbudget" / "corpus" / "vllm-adaptive-0.33-stop-cuts-computed.json"


def finished_with_a_cut(version: str) -> tuple[int, int, int]:
    """A 2-token prompt with max_tokens 2 whose first decode accepts its one draft: one of the
    two tokens it would add is cut. Its computed and total tokens after that output, and the
    cached blocks left in the pool."""
    s = scheduler_for(BudgetConfig(max_num_batched_tokens=16, max_num_seqs=4, block_size=4, num_kv_blocks=3,
                                   max_model_len=12, num_speculative_tokens=1, method="ngram",
                                   engine_version=version), get_policy("vllm-adaptive"))
    s.add_request("a", 2, 2)
    s.update_from_output(s.schedule())
    decode = s.schedule()
    assert dict(decode.num_scheduled_tokens) == {"a": 2} and dict(decode.scheduled_draft_tokens) == {"a": 1}
    state = s.update_from_output(decode, {"a": 1}).requests["a"]
    assert state.status == "finished" and state.num_output_tokens == 2
    return state.num_computed_tokens, state.num_prompt_tokens + state.num_output_tokens, len(s.pool.key_of)


@pytest.mark.parametrize(("version", "expected"), [("0.32", (4, 4, 0)), ("0.33", (3, 4, 0))])
def test_a_cut_stop_leaves_every_token_but_the_last_computed_in_0_33_only(version: str, expected) -> None:
    # 0.32 caches nothing at output, so its uncut count caches nothing either
    assert finished_with_a_cut(version) == expected


def test_the_block_a_cut_token_completed_is_freed_uncached_and_reused_first() -> None:
    result = replay_on_model(load_trace(TRACE))
    assert result.ok, "; ".join(result.problems)
    assert dict(result.steps[3].num_scheduled_tokens) == {"b": 2}  # 8 tokens hit, the last one padded to 1 + k
