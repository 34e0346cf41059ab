"""The stand-ins TensorRT-LLM's scheduler.py runs with (tokenbudget/harness/trtllm/standins) and the
C++ KV manager's answers (kv_manager.py): the C++ rules they cite, without scheduler.py."""
from __future__ import annotations

from pathlib import Path

import pytest

from tokenbudget.harness.trtllm import runtime
from tokenbudget.harness.trtllm.kv_manager import KvCacheManager, OutOfBlocks
from tokenbudget.harness.trtllm.standins.llm_request import LlmRequest, LlmRequestState
from tokenbudget.model.trtllm.deployments import (DEPLOYMENTS, GUARANTEED_NO_EVICT, MAX_UTILIZATION, capacity_of,
                                                  deployment_of)


def generating(prompt: int, max_new: int, generated: int, kv: KvCacheManager, lookahead: int = 0) -> LlmRequest:
    """A request past its context with ``generated`` tokens, its KV as prepare_resources leaves it."""
    req = LlmRequest("r", prompt, max_new)
    req.context_chunk_size = prompt
    req.move_to_next_context_chunk()
    req.state = LlmRequestState.GENERATION_IN_PROGRESS
    req.num_tokens += generated
    kv.add_sequence("r", prompt)
    kv.resize("r", req.num_tokens - 1 + lookahead)
    return req


def test_the_schedulable_states_keep_their_cpp_order() -> None:
    s = LlmRequestState
    assert s.ENCODER_INIT.value < s.CONTEXT_INIT.value < s.GENERATION_IN_PROGRESS.value
    assert s.GENERATION_IN_PROGRESS.value < s.GENERATION_TO_COMPLETE.value < s.GENERATION_COMPLETE.value
    assert not s.CONTEXT_INIT.value <= s.DISAGG_CONTEXT_WAIT_SCHEDULER.value < s.GENERATION_TO_COMPLETE.value


def test_a_chunk_is_clamped_to_the_context_left_and_moves_the_cursor() -> None:
    req = LlmRequest("r", 10, 5)
    assert req.is_first_context_chunk and req.is_last_context_chunk  # the whole prompt, as constructed
    req.context_chunk_size = 4
    assert not req.is_last_context_chunk
    req.move_to_next_context_chunk()
    assert (req.context_current_position, req.context_remaining_length, req.context_chunk_size) == (4, 6, 0)
    assert not req.is_first_context_chunk
    req.context_chunk_size = 100  # setContextChunkSize clamps
    assert req.context_chunk_size == 6 and req.is_last_context_chunk


def test_discarding_more_drafts_than_held_raises_as_the_cpp_check() -> None:
    req = LlmRequest("r", 4, 4)
    req.draft_tokens = [0, 0, 0]
    req.discard_draft_tokens(2)
    assert req.num_draft_tokens == 1 and req.has_draft_tokens()
    with pytest.raises(RuntimeError, match="discard 2 draft tokens of 1"):
        req.discard_draft_tokens(2)


def test_pause_moves_the_output_into_the_prompt_and_keeps_the_drafts() -> None:
    kv = KvCacheManager(64, 4, 64)
    req = generating(prompt=6, max_new=10, generated=3, kv=kv)
    req.draft_tokens = [0, 0]
    req.pause(max_input_len=63)
    assert (req.prompt_len, req.max_new_tokens, req.num_tokens) == (9, 7, 9)
    assert req.is_context_init_state and req.context_current_position == 0 and req.context_chunk_size == 9
    assert req.num_draft_tokens == 2


def test_blocks_to_completion_are_prompt_and_max_new_less_those_held() -> None:
    kv = KvCacheManager(64, 4, 64)
    fresh = LlmRequest("new", 10, 7)  # ceil(17 / 4) = 5, none held
    assert kv.get_remaining_blocks_to_completion(fresh, 64) == 5
    req = generating(prompt=10, max_new=7, generated=6, kv=kv, lookahead=3)  # holds ceil(18 / 4) = 5
    assert kv.get_remaining_blocks_to_completion(req, 64) == 0
    kv.add_token("r", 3)  # 1 + drafts past the end: held beyond what completion counts
    assert kv.get_remaining_blocks_to_completion(req, 64) == -1


def test_one_step_needs_the_whole_prompt_first_then_the_next_tokens_capped_at_max_new() -> None:
    kv = KvCacheManager(64, 4, 64)
    first = LlmRequest("new", 9, 5)
    first.draft_tokens = [0, 0]
    assert kv.get_needed_blocks_one_step(first, False, 64) == 3  # ceil((9 + 2) / 4)
    req = generating(prompt=8, max_new=10, generated=1, kv=kv)  # KV holds 8 tokens: 2 blocks
    req.draft_tokens = [0, 0, 0]
    assert kv.get_needed_blocks_one_step(req, False, 64) == 1  # 8 + 4 = 12: 3 blocks
    assert kv.get_needed_blocks_one_step(req, True, 64) == 2  # 8 + 8 = 16: 4 blocks
    small = KvCacheManager(64, 2, 64)
    near_end = generating(prompt=6, max_new=3, generated=2, kv=small)  # KV holds 7 tokens: 4 blocks
    near_end.draft_tokens = [0, 0, 0]
    assert small.get_needed_blocks_one_step(near_end, False, 64) == 1  # 7 + min(4, 3 - 1) = 9: 5 blocks, not 6


def test_scheduling_counts_free_blocks_and_a_paused_sequences_blocks() -> None:
    kv = KvCacheManager(8, 2, 64)
    kv.add_sequence("a", 5)  # 3 blocks
    kv.start_scheduling()
    assert kv.scheduling_has_free_blocks(5, 64) and not kv.scheduling_has_free_blocks(6, 64)
    kv.scheduling_remove_sequence("a")
    assert kv.scheduling_has_free_blocks(8, 64)
    assert kv.get_kv_cache_stats().num_free_blocks_per_window_size == {64: 5}


def test_a_rewind_frees_the_last_blocks_and_running_out_raises() -> None:
    kv = KvCacheManager(4, 2, 64)
    kv.add_sequence("a", 3)
    kv.add_token("a", 4)  # 7 tokens: 4 blocks
    assert kv.num_in_use == 4
    kv.resize("a", 4)  # rewind to 4 tokens: 2 blocks
    assert kv.num_in_use == 2 and kv.blocks["a"] == [0, 1]
    kv.add_sequence("b", 4)
    with pytest.raises(OutOfBlocks, match="Can't allocate new blocks"):
        kv.add_token("a", 1)
    kv.remove_sequence("b")
    assert kv.num_in_use == 2


def test_a_folder_without_scheduler_py_is_one_line_naming_the_fix(tmp_path: Path) -> None:
    with pytest.raises(runtime.TrtllmUnavailable) as refused:
        runtime.check_folder(tmp_path)
    message = str(refused.value)
    assert "\n" not in message and "tensorrt-llm-002f3cc3.tar.gz" in message and runtime.PATH_ENV in message


def test_the_release_of_an_archive_and_of_an_install(tmp_path: Path) -> None:
    archive = tmp_path / "tensorrt-llm-002f3cc3"
    archive.mkdir()
    assert runtime.release(archive) == "002f3cc3"
    install = tmp_path / "site-packages"
    (install / "tensorrt_llm").mkdir(parents=True)
    (install / "tensorrt_llm" / "version.py").write_text('__version__ = "1.3.0rc7"\n')
    assert runtime.release(install) == "1.3.0rc7"


def test_each_deployment_names_one_capacity_policy_and_the_default_is_max_utilization() -> None:
    assert capacity_of(None) == MAX_UTILIZATION
    assert {capacity_of(v) for v in DEPLOYMENTS} == {GUARANTEED_NO_EVICT, MAX_UTILIZATION, "MAX_REQUESTS"}
    assert capacity_of(deployment_of(GUARANTEED_NO_EVICT)) == GUARANTEED_NO_EVICT
