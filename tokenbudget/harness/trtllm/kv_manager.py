"""The KV cache manager scheduler.py asks (C++ ``KVCacheManager``, cpp/tensorrt_llm/batch_manager/
kvCacheManager.cpp), over a paged pool of ``num_blocks`` blocks of ``block_size`` tokens: one
window, no block reuse, beam width 1, no sink tokens.

The capacity policies read it (scheduler.py:1755-1803 GUARANTEED_NO_EVICT, 1813-1869 and
1582-1664 MAX_UTILIZATION); the harness's executor writes it as ``KVCacheManager.prepare_resources``
and ``update_resources`` do (``add_sequence``, ``add_token``, ``rewind``, ``remove_sequence``). A
sequence holds ``ceil(tokens / block_size)`` blocks; a block is freed when its last token goes.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ...spec.intlike import cdiv


class OutOfBlocks(RuntimeError):
    """BlockManager::getFreeBlock with none left: the C++ check throws."""


@dataclass(frozen=True)
class KvCacheStats:
    num_free_blocks_per_window_size: dict[int, int]


class KvCacheManager:
    enable_block_reuse = False
    is_variable_window = False

    def __init__(self, num_blocks: int, block_size: int, window: int) -> None:
        self.num_blocks, self.block_size, self.window = num_blocks, block_size, window
        self.max_attention_window_vec = [window]
        self.free: list[int] = list(range(num_blocks - 1, -1, -1))  # popped from the end: block 0 first
        self.tokens: dict[Any, int] = {}
        self.blocks: dict[Any, list[int]] = {}
        self.scheduling_free = num_blocks

    # -- what the schedulers ask -------------------------------------------------------------
    def get_kv_cache_stats(self) -> KvCacheStats:
        return KvCacheStats({self.window: len(self.free)})

    def get_remaining_blocks_to_completion(self, req: Any, window_size: int) -> int:
        """KVCacheManager::getRemainingBlocksToCompletion at beam width 1: the blocks of
        prompt + max_new_tokens (up to the window) less those the sequence holds."""
        total = cdiv(min(req.prompt_len + req.max_new_tokens, window_size), self.block_size)
        return total - len(self.blocks.get(req.py_request_id, ()))

    def get_needed_blocks_one_step(self, req: Any, two_steps_look_ahead: bool, window_size: int) -> int:
        """KVCacheManager::getNeededBlocksOneStep: a first context chunk needs its whole prompt
        and its drafts (up to max_new_tokens); a generation request the blocks its next
        ``1 + drafts`` tokens (twice that with the two-step lookahead, up to what max_new_tokens
        leaves) add, none past the window; anything else none."""
        if req.is_context_init_state and req.is_first_context_chunk:
            return cdiv(min(req.prompt_len + min(req.num_draft_tokens, req.max_new_tokens), window_size),
                        self.block_size)
        if req.is_generation_in_progress_state:
            current = self.tokens[req.py_request_id]
            left = req.max_new_tokens - (current - req.prompt_len)
            step = (2 if two_steps_look_ahead else 1) * (req.num_draft_tokens + 1)
            following = current + min(step, left)
            if following > window_size:
                return 0
            return cdiv(following, self.block_size) - cdiv(current, self.block_size)
        return 0

    def start_scheduling(self) -> None:
        """BlockManager::startScheduling: the scheduling count starts at the free blocks."""
        self.scheduling_free = len(self.free)

    def scheduling_has_free_blocks(self, num_required: int, window_size: int) -> bool:
        return num_required <= self.scheduling_free

    def scheduling_remove_sequence(self, request_id: Any) -> None:
        """BlockManager::schedulingReleaseBlocks: a paused sequence's blocks count as free."""
        self.scheduling_free += len(self.blocks.get(request_id, ()))

    # -- what the executor does ----------------------------------------------------------------
    def add_sequence(self, request_id: Any, input_length: int) -> None:
        """KVCacheManager::addSequence: blocks for the whole prompt at once."""
        assert request_id not in self.tokens, request_id
        self.tokens[request_id], self.blocks[request_id] = 0, []
        self.resize(request_id, input_length)

    def add_token(self, request_id: Any, n: int = 1) -> None:
        self.resize(request_id, self.tokens[request_id] + n)

    def resize(self, request_id: Any, num_tokens: int) -> None:
        """Hold ``num_tokens`` tokens: new blocks past a boundary (OutOfBlocks when none is
        free), the last ones freed on a rewind (removeToken)."""
        held = self.blocks[request_id]
        want = cdiv(num_tokens, self.block_size)
        if want - len(held) > len(self.free):
            raise OutOfBlocks(f"[TensorRT-LLM][ERROR] Can't allocate new blocks. No free blocks left "
                              f"(request {request_id} needs {want - len(held)}, {len(self.free)} free)")
        while len(held) < want:
            held.append(self.free.pop())
        while len(held) > want:
            self.free.append(held.pop())
        self.tokens[request_id] = num_tokens

    def remove_sequence(self, request_id: Any) -> None:
        for block in reversed(self.blocks.pop(request_id, [])):
            self.free.append(block)
        self.tokens.pop(request_id, None)

    @property
    def num_in_use(self) -> int:
        return self.num_blocks - len(self.free)
