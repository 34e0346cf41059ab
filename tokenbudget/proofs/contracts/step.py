"""The reference scheduler's step under a contract: every step invariant holds for the safe policies.

``SchedulerLoop.schedule`` builds its state from many requests, so its contract is stated
here, on a step driven from plain ints that CrossHair makes symbolic: a config, a few
prompts added to an empty system, one step, their output (every draft accepted), and
a second step in which the requests decode.
"""
from __future__ import annotations

from ...model import BudgetConfig, get_policy, scheduler_for
from ...spec import StepRecord, check_step


def _two_steps(policy: str, b: int, s: int, k: int, prompts: list[int], parallel: bool) -> StepRecord:
    cfg = BudgetConfig(max_num_batched_tokens=b, max_num_seqs=s, num_speculative_tokens=k,
                       method="ngram" if k else None, parallel_drafting=parallel and k > 0, block_size=4,
                       num_kv_blocks=32, max_model_len=32)
    sched = scheduler_for(cfg, get_policy(policy))
    for i, n in enumerate(prompts):
        sched.add_request(str(i), n, 8)
    first = sched.schedule()
    assert check_step(first) == [], check_step(first)
    sched.update_from_output(first, {rid: k for rid in first.num_scheduled_tokens})
    return sched.schedule()


def vllm_adaptive_step(b: int, s: int, k: int, prompts: list[int]) -> StepRecord:
    """Two steps of vllm-adaptive keep every step invariant.

    pre: 1 <= s <= b <= 40 and 0 <= k <= 3 and b > k - 1 and 1 <= len(prompts) <= 3
    pre: all(1 <= n <= 20 for n in prompts)
    post: check_step(__return__) == []
    """
    return _two_steps("vllm-adaptive", b, s, k, prompts, parallel=True)


def fastdeploy_decode_count_step(b: int, s: int, k: int, prompts: list[int]) -> StepRecord:
    """Two steps of fastdeploy-decode-count keep every step invariant, away from its full-batch
    stall: at B = S * (k + 1) a full batch of decodes is left no budget, a decode whose next
    block is missing stays paused, and ``progress`` flags it (finding F5's mechanism; the
    corpus's fastdeploy-decode-count-full-batch-fixpoint.json).

    pre: 1 <= s and 4 <= b <= min(40, 32 * s) and 0 <= k <= 3 and b > s * max(k + 1, 2) and 1 <= len(prompts) <= 3
    pre: all(1 <= n <= 20 for n in prompts)
    post: check_step(__return__) == []
    """
    return _two_steps("fastdeploy-decode-count", b, s, k, prompts, parallel=False)  # FastDeploy has none
