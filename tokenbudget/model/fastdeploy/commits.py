"""The FastDeploy commit table: what the scheduler's block rules are at each modelled commit."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

ENC_DEC_BLOCK_NUM = 2  # FD_ENC_DEC_BLOCK_NUM (envs.py:112)
PREALLOC_SLOT_THRESHOLD = 12  # prealloc_dec_block_slot_num_threshold (config.py:1598)
RESERVE_BLOCKS = 16  # FD_RESERVE_OUTPUT_BLOCK_NUM_FOR_DECODE_WHEN_SCHEDULE_NEW_PREFILL (envs.py:218)
RESERVE_DECAY = 0.025  # FD_RESERVE_DECAY_OUTPUT_BLOCK_NUM_FOR_DECODE_WHEN_SCHEDULE_NEW_PREFILL (envs.py:221)
RESERVE_MIN = 0  # FD_RESERVE_MIN_OUTPUT_BLOCK_NUM_FOR_DECODE_WHEN_SCHEDULE_NEW_PREFILL (envs.py:224)
RATIO_INIT, RATIO_MIN, RATIO_DECAY = 0.7, 0.1, 0.001  # FD_INIT/MIN_NEW_TOKEN_RATIO, _DECAY (envs.py:216-218, 564c78d78)
CLIP_MAX_NEW_TOKENS = 4096  # FD_CLIP_MAX_NEW_TOKENS (envs.py:219, 564c78d78)
RATIO_EXTRA_BLOCKS = 16  # blocks per decode in the ratio after a preemption (resource_manager_v1.py:488, 564c78d78)


@dataclass(frozen=True)
class FastDeployCommit:
    """The block-rule facts of one FastDeploy commit that differ between commits."""

    commit: str
    pr: str  # the merge it is, as the policies' ``version`` names it
    policy: str  # the built-in policy whose budget it runs
    prealloc_scales_with_k: bool  # #7471: the decode preallocation threshold grows with k
    token_ratio_reserve: bool = False  # #7498: the new-token-ratio reserve, decode-only victims, chunks wait

    def prealloc_threshold(self, k: int, block_size: int) -> int:
        """The free slots past a decode's tokens at or under which a visit gives it blocks."""
        if self.prealloc_scales_with_k and k > 0:
            return min(PREALLOC_SLOT_THRESHOLD * (k + 1), max(0, block_size * ENC_DEC_BLOCK_NUM - 1))
        return PREALLOC_SLOT_THRESHOLD


FASTDEPLOY_COMMITS: Mapping[str, FastDeployCommit] = {
    "43685a98a": FastDeployCommit("43685a98a", "PR #7438", "fastdeploy-reserve", False),
    "b19754c5f": FastDeployCommit("b19754c5f", "PR #7499", "fastdeploy-decode-count", False),
    "2a606e361": FastDeployCommit("2a606e361", "PR #7623", "fastdeploy-spec-method", False),
    "564c78d78": FastDeployCommit("564c78d78", "PR #7623", "fastdeploy-spec-method", True, True),
}
MODELLED: tuple[str, ...] = tuple(FASTDEPLOY_COMMITS)


def commit_row(commit: str | None) -> FastDeployCommit | None:
    """The row of ``commit`` (a prefix of 7 or more hex digits of a modelled one), or None."""
    if commit is None:
        return None
    return next((row for key, row in FASTDEPLOY_COMMITS.items() if len(commit) >= 7
                 and (key.startswith(commit) or commit.startswith(key))), None)


def new_blocks(computed: int, tokens: int, held: int, block_size: int, max_blocks: int, speculative: bool) -> int:
    """``get_new_block_nums``: the blocks a prefill chunk of ``tokens`` takes."""
    need = (computed + tokens + block_size - 1) // block_size - held
    return min(need + 1, max_blocks) if speculative else min(need, max_blocks)


def admission_blocks(chunk_blocks: int, running: int, reserve: int, relaxed: bool, max_blocks: int,
                     speculative: bool) -> int:
    """``_get_can_schedule_prefill_threshold_block`` before #7498: the free blocks admission asks for."""
    if relaxed:
        return chunk_blocks
    wanted = chunk_blocks + running * reserve
    return min(wanted + 1, max_blocks) if speculative else wanted


def ratio_admission_blocks(chunk_blocks: int, reserved_blocks: int, max_blocks: int, speculative: bool) -> int:
    """The same at #7498: the chunk's blocks and the running requests' reserve, one more with a method."""
    wanted = chunk_blocks + reserved_blocks
    return min(wanted + 1, max_blocks) if speculative else wanted


def ratio_reserve_blocks(max_tokens: int, outputs: int, ratio: float, block_size: int) -> int:
    """``_get_running_request_reserve_blocks`` (#7498): a running request's share of the reserve."""
    reserved = max(int(min(max_tokens - outputs, CLIP_MAX_NEW_TOKENS) * ratio), 0)
    return (reserved + block_size - 1) // block_size


def ratio_after_preemption(outputs: int, max_tokens: int, decodes: int, block_size: int, running: int) -> float:
    """``_reset_reserve_on_preemption`` (#7498), over the running requests' sums."""
    if not running:
        return RATIO_INIT
    return min((outputs + RATIO_EXTRA_BLOCKS * block_size * decodes) / (max_tokens + 1), RATIO_INIT)
