"""Builders of hand-made observations for the invariant tests."""
from __future__ import annotations

from dataclasses import replace
from typing import Any

from tokenbudget.spec import LedgerEntry, StepLimits, StepRecord
from tokenbudget.spec.trace import AddOp, StepOp, Trace

LIMITS = StepLimits(
    max_num_batched_tokens=20, max_num_scheduled_tokens=20, max_num_seqs=4, num_speculative_tokens=4,
    draft_slots=3, lookahead=4, max_model_len=64, block_size=4, num_kv_blocks=32,
)


def good_record(**changes: Any) -> StepRecord:
    """The seed-000 first step under vllm-adaptive: grants {0: 10, 1: 4}, d = 3, B = T = 20."""
    record = StepRecord(
        step=0,
        limits=LIMITS,
        num_scheduled_tokens={"0": 10, "1": 4},
        scheduled_draft_tokens={"0": 0, "1": 0},
        runner_rows={"0": 13, "1": 7},
        computed_before={"0": 0, "1": 0},
        num_tokens={"0": 10, "1": 10},
        padded=frozenset(),
        prefill=frozenset({"0", "1"}),
        preempted=(),
        running=("0", "1"),
        waiting=(),
        kv_blocks_in_use=6,
        block_tables={"0": (0, 1, 2, 3), "1": (4, 5)},
        block_keys={},
        initial_token_budget=20,
        initial_input_budget=20,
        ledger=(
            LedgerEntry("grant", "0", 10, 20, 10, 20, 7),
            LedgerEntry("grant", "1", 4, 10, 6, 7, 0),
        ),
        progress_possible=True,
        unserved_demand=6,
    )
    return replace(record, **changes)


# SGLang 0.5.23 on a pool its validation refuses (replay it with validate=False): r1 decodes
# until its reservation outgrows the pool and retract_decode aborts it, the last decode; r2 never fits.
SGLANG_TIGHT = {"max_num_batched_tokens": 16, "max_num_seqs": 2, "num_speculative_tokens": 2, "method": "eagle3",
                "parallel_drafting": False, "block_size": 1, "num_kv_blocks": 13, "max_model_len": 16,
                "enable_prefix_caching": False}
SGLANG_ABORTS_LAST = Trace(
    policy="sglang-0.5.23", config=SGLANG_TIGHT,
    ops=(AddOp("r1", 4, 7), AddOp("r2", 4, 11), *[StepOp({}) for _ in range(10)]),
    source="sglang-0.5.23 on a pool its validation refuses")
