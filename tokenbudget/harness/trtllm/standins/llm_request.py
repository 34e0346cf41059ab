"""``tensorrt_llm._torch.pyexecutor.llm_request`` (llm_request.py, whose ``LlmRequest`` subclasses the C++
``tensorrt_llm.bindings.internal.batch_manager.LlmRequest``): the request state and the accessors
scheduler.py reads, with the C++ rules of cpp/include/tensorrt_llm/batch_manager/llmRequest.h.

A request is text only, beam width 1, with no encoder, LoRA, multimodal or disaggregated part and no
prefix reuse (``estimated_reusable_tokens`` 0, the prepopulated prompt length 0)."""
from __future__ import annotations

from enum import Enum
from typing import Any


class LlmRequestState(Enum):
    """llmRequest.h's ``enum class LlmRequestState`` with its C++ values (the order is what
    the schedulers compare: scheduler.py:264, 878-882, 1952-1957)."""

    UNKNOWN = 0
    ENCODER_INIT = 1
    DISAGG_CONTEXT_WAIT_SCHEDULER = 7  # not in the stored header: any value outside [10, 14) is as unschedulable
    DISAGG_GENERATION_INIT = 8
    DISAGG_GENERATION_TRANS_IN_PROGRESS = 9
    CONTEXT_INIT = 10
    DISAGG_CONTEXT_INIT_AND_TRANS = 11
    DISAGG_GENERATION_TRANS_COMPLETE = 12
    GENERATION_IN_PROGRESS = 13
    GENERATION_TO_COMPLETE = 14
    GENERATION_COMPLETE = 20
    DISAGG_CONTEXT_TRANS_IN_PROGRESS = 21
    DISAGG_CONTEXT_COMPLETE = 22
    DISAGG_TRANS_ERROR = -1


class LlmRequest:
    """One request: its tokens (prompt then generated), its context cursor and chunk, its draft tokens."""

    def __init__(self, request_id: Any, prompt_len: int, max_new_tokens: int) -> None:
        self.request_id = self.py_request_id = request_id
        self.prompt_len = prompt_len
        self.max_new_tokens = max_new_tokens
        self.num_tokens = prompt_len  # tokens.size() of beam 0
        self.state = LlmRequestState.CONTEXT_INIT
        self.context_current_position = 0
        self._chunk = prompt_len  # mContextChunkSize starts as the prompt (llmRequest.h constructor)
        self.draft_tokens: list[int] = []
        self.estimated_reusable_tokens = 0
        self.expect_snapshot_points: list[int] = []
        self.encoder_output_len = 0

    # -- state ---------------------------------------------------------------------------
    @property
    def state_value(self) -> int:
        return self.state.value

    @property
    def is_context_init_state(self) -> bool:
        return self.state == LlmRequestState.CONTEXT_INIT

    @property
    def is_generation_in_progress_state(self) -> bool:
        """isGenerationInProgressState: in progress or to complete."""
        return self.state in (LlmRequestState.GENERATION_IN_PROGRESS, LlmRequestState.GENERATION_TO_COMPLETE)

    @property
    def is_encoder_init_state(self) -> bool:
        return self.state == LlmRequestState.ENCODER_INIT

    @property
    def is_disagg_generation_init_state(self) -> bool:
        return self.state == LlmRequestState.DISAGG_GENERATION_INIT

    # -- the context cursor ------------------------------------------------------------------
    @property
    def context_remaining_length(self) -> int:
        return self.prompt_len - self.context_current_position

    @property
    def context_chunk_size(self) -> int:
        return self._chunk

    @context_chunk_size.setter
    def context_chunk_size(self, size: int) -> None:
        """setContextChunkSize: checked non-negative, clamped to what the context has left."""
        assert self.is_context_init_state and size >= 0, (self.state, size)
        self._chunk = min(size, self.context_remaining_length)

    @property
    def is_first_context_chunk(self) -> bool:
        return self.context_current_position == 0  # == getPrepopulatedPromptLen(), 0 without reuse

    @property
    def is_last_context_chunk(self) -> bool:
        return self.context_current_position + self._chunk == self.prompt_len

    def move_to_next_context_chunk(self) -> None:
        self.context_current_position += self._chunk
        self._chunk = 0

    # -- tokens and drafts ----------------------------------------------------------------------
    def get_num_tokens(self, beam: int) -> int:
        return self.num_tokens

    @property
    def max_num_generated_tokens(self) -> int:
        return self.num_tokens - self.prompt_len

    def get_beam_width_by_iter(self, for_next_iteration: bool = False) -> int:
        return 1

    @property
    def num_draft_tokens(self) -> int:
        return len(self.draft_tokens)

    def has_draft_tokens(self) -> bool:
        return bool(self.draft_tokens)

    def discard_draft_tokens(self, n: int) -> None:
        """discardDraftTokens: 0 < n <= the drafts held, else the C++ check throws."""
        if not 0 < n <= len(self.draft_tokens):
            raise RuntimeError(f"[TensorRT-LLM][ERROR] Can't discard {n} draft tokens of {len(self.draft_tokens)}")
        del self.draft_tokens[len(self.draft_tokens) - n:]

    def pause(self, max_input_len: int) -> None:
        """LlmRequest::pause at beam width 1: the generated tokens join the prompt (up to
        max_input_len), max_new_tokens shrinks by as many, the context starts over; the draft
        tokens stay (pause leaves mDraftTokens alone)."""
        new_prompt = min(max_input_len, self.num_tokens)
        self.num_tokens = new_prompt
        self.max_new_tokens -= new_prompt - self.prompt_len
        self.prompt_len = new_prompt
        self.state = LlmRequestState.CONTEXT_INIT
        self.context_current_position = 0
        self._chunk = self.prompt_len


def get_multimodal_encoder_token_lengths(request: Any) -> list[int]:
    """llm_request.py's helper for the multimodal encoder budget: a text request has none."""
    return []


def is_multimodal_encoder_ready(request: Any) -> bool:
    return True
