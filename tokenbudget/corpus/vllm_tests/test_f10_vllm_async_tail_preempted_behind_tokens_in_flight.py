# SPDX-License-Identifier: Apache-2.0
"""A token-budget counterexample for vLLM's scheduler: finding F10.

Trace: f10-vllm-async-tail-preempted-behind-tokens-in-flight.json.

F10: async, a decode's placeholder drafts do not fit the KV: it preempts itself behind a
request finishing in flight, and the step grants nothing

The reference model reports progress: step 1: a request could take a token but the step
granted none.

Exported by tokenbudget (export --vllm-test): self-contained, it needs only vLLM and pytest.
It fails where vLLM has the bug, and passes where vLLM schedules the same requests without
breaking the asserts or refuses the deployment.
"""


import json
import zlib

import torch

from vllm.config import CacheConfig, ModelConfig, ParallelConfig, SchedulerConfig, SpeculativeConfig, VllmConfig
from vllm.sampling_params import SamplingParams
from vllm.utils.hashing import get_hash_fn_by_name
from vllm.v1.core.kv_cache_utils import get_request_block_hasher, init_none_hash
from vllm.v1.core.sched.scheduler import Scheduler
from vllm.v1.kv_cache_interface import FullAttentionSpec, KVCacheConfig, KVCacheGroupSpec
from vllm.v1.outputs import DraftTokenIds, ModelRunnerOutput
from vllm.v1.request import Request, RequestStatus
from vllm.v1.structured_output import StructuredOutputManager
from vllm.v1.core.sched.async_scheduler import AsyncScheduler


def create_scheduler(model_dir):
    """The deployment under test, on a fake OPT model written to model_dir (nothing is downloaded)."""
    hf_config = {
        "architectures": ["OPTForCausalLM"],
        "model_type": "opt",
        "vocab_size": VOCAB_SIZE,
        "max_position_embeddings": 16,
    }
    (model_dir / "config.json").write_text(json.dumps(hf_config))
    model_config = ModelConfig(
        model=str(model_dir), max_model_len=16, dtype="float16", seed=0, skip_tokenizer_init=True,
    )
    scheduler_config = SchedulerConfig(
        max_model_len=16,
        is_encoder_decoder=False,
        max_num_batched_tokens=64,
        max_num_scheduled_tokens=None,
        max_num_seqs=4,
        long_prefill_token_threshold=0,
        enable_chunked_prefill=True,
        policy="fcfs",
        async_scheduling=False,
    )
    parallel_config = ParallelConfig()
    speculative_config = SpeculativeConfig(
        method="ngram", num_speculative_tokens=2, parallel_drafting=False,
        target_model_config=model_config, target_parallel_config=parallel_config,
    )
    vllm_config = VllmConfig(
        model_config=model_config,
        cache_config=CacheConfig(block_size=4, enable_prefix_caching=True),
        parallel_config=parallel_config,
        scheduler_config=scheduler_config,
        speculative_config=speculative_config,
    )
    # No mtp drafter is loaded: the config was validated as ngram; the scheduler reads only the
    # method's draft slots and lookahead, so set the method and re-run the budget check that reads them.
    speculative_config.method = "mtp"
    speculative_config.parallel_drafting = False
    vllm_config._set_max_num_scheduled_tokens()
    # Validated sync (vLLM refuses the ngram stand-in async): the deployment runs AsyncScheduler.
    vllm_config.scheduler_config.async_scheduling = True
    num_blocks = 5  # 4 usable blocks and vLLM's null block
    spec = FullAttentionSpec(block_size=4, num_kv_heads=1, head_size=1, dtype=torch.float32)
    kv_cache_config = KVCacheConfig(
        num_blocks=num_blocks, kv_cache_tensors=[], kv_cache_groups=[KVCacheGroupSpec(["layer"], spec)]
    )
    vllm_config.cache_config.num_gpu_blocks = num_blocks
    return AsyncScheduler(
        vllm_config=vllm_config,
        kv_cache_config=kv_cache_config,
        structured_output_manager=StructuredOutputManager(vllm_config),
        block_size=4,
        log_stats=False,
    )


VOCAB_SIZE = 32000


def tokens(key, start, count):
    """Token ids at positions [start, start + count) of the stream named key; never an EOS."""
    seed = zlib.crc32(key.encode())
    return [1 + (seed + p * 7919) % (VOCAB_SIZE - 1) for p in range(start, start + count)]


def make_request(scheduler, request_id, prompt_token_ids, max_tokens, arrival_time, priority=0):
    block_hasher = None
    if scheduler.cache_config.enable_prefix_caching:
        hash_fn = get_hash_fn_by_name(scheduler.cache_config.prefix_caching_hash_algo)
        init_none_hash(hash_fn)
        block_hasher = get_request_block_hasher(scheduler.block_size, hash_fn)
    return Request(
        request_id=request_id,
        prompt_token_ids=prompt_token_ids,
        sampling_params=SamplingParams(max_tokens=max_tokens, ignore_eos=True),
        pooling_params=None,
        arrival_time=arrival_time,
        priority=priority,
        block_hasher=block_hasher,
    )


def check_output(scheduler, output):
    """What every SchedulerOutput must keep: the token budget, the sequence cap, and the
    shape of speculative decoding (at most k drafts, and 1 + drafts tokens for a request
    that has drafts, padded ones included)."""
    assert output.total_num_scheduled_tokens <= scheduler.max_num_scheduled_tokens, (
        f"{output.total_num_scheduled_tokens} tokens scheduled, budget {scheduler.max_num_scheduled_tokens}")
    assert len(output.num_scheduled_tokens) <= scheduler.max_num_running_reqs
    for request_id, drafts in output.scheduled_spec_decode_tokens.items():
        assert len(drafts) <= scheduler.num_spec_tokens, f"{request_id}: {len(drafts)} drafts"
        assert output.num_scheduled_tokens[request_id] == 1 + len(drafts), (
            f"{request_id}: {output.num_scheduled_tokens[request_id]} tokens with {len(drafts)} drafts")


def run_step(scheduler, accepted):
    """schedule() once, check the output, and apply a fake model runner's output as
    EngineCore.step does: every request past its prefill samples its first accepted[id]
    real drafts and one token, then proposes num_spec_tokens new drafts."""
    output = scheduler.schedule()
    check_output(scheduler, output)
    req_ids = list(output.num_scheduled_tokens)
    sampled, draft_req_ids, draft_token_ids = [], [], []
    for request_id in req_ids:
        request = scheduler.requests[request_id]
        if request.is_prefill_chunk:
            sampled.append([])
            continue
        drafts = output.scheduled_spec_decode_tokens.get(request_id, [])
        real = drafts.index(-1) if -1 in drafts else len(drafts)
        n = max(0, min(accepted.get(request_id, 0), real))
        position = request.num_tokens + n
        sampled.append(drafts[:n] + tokens("output:" + request_id, position, 1))
        if scheduler.num_spec_tokens:
            draft_req_ids.append(request_id)
            draft_token_ids.append(tokens("output:" + request_id, position + 1, scheduler.num_spec_tokens))
    runner_output = ModelRunnerOutput(
        req_ids=req_ids, req_id_to_index={r: i for i, r in enumerate(req_ids)}, sampled_token_ids=sampled)
    scheduler.update_from_output(output, runner_output)
    if draft_req_ids:
        scheduler.update_draft_token_ids(DraftTokenIds(req_ids=draft_req_ids, draft_token_ids=draft_token_ids))
    return output


def run_async_step(scheduler, accepted, state):
    """schedule() once, check the output, then apply the batch before's output as
    EngineCore.step_with_batch_queue does (a queue of two). Drafts are the scheduler's -1
    placeholders; the V1 model runner fills them only for the requests of the batch before,
    so a running request scheduled with placeholders it did not get there has stale drafts.
    Each request that samples takes its first accepted[id] drafts (real ones only) and one token."""
    running_before = {r.request_id for r in scheduler.running}
    output = scheduler.schedule()
    check_output(scheduler, output)
    for request_id, drafts in output.scheduled_spec_decode_tokens.items():
        assert request_id not in running_before or request_id in state["sampled"] or -1 not in drafts, (
            f"{request_id}: scheduled {len(drafts)} placeholder drafts made for an earlier step")
    samples = [r for r in output.num_scheduled_tokens if not scheduler.requests[r].is_prefill_chunk]
    fresh = {r: n for r, n in accepted.items() if r in state["sampled"]}
    previous, state["batch"], state["sampled"] = state["batch"], (output, samples, fresh), set(samples)
    if previous is not None:
        apply_output(scheduler, *previous)
    return output


def apply_output(scheduler, output, samples, accepted):
    req_ids = list(output.num_scheduled_tokens)
    sampled = []
    for request_id in req_ids:
        request = scheduler.requests.get(request_id)
        if request_id not in samples or request is None:
            sampled.append([])
            continue
        n = max(0, min(accepted.get(request_id, 0), len(output.scheduled_spec_decode_tokens.get(request_id, []))))
        sampled.append(tokens("output:" + request_id, request.num_tokens, n + 1))
    runner_output = ModelRunnerOutput(
        req_ids=req_ids, req_id_to_index={r: i for i, r in enumerate(req_ids)}, sampled_token_ids=sampled)
    scheduler.update_from_output(output, runner_output)


def test_f10_vllm_async_tail_preempted_behind_tokens_in_flight(tmp_path, monkeypatch):
    monkeypatch.setenv("VLLM_USE_V2_MODEL_RUNNER", "0")
    try:
        scheduler = create_scheduler(tmp_path)
    except ValueError as exc:
        print(f"vLLM refuses the deployment, so the bug cannot happen: {exc}")
        return
    state = {"batch": None, "sampled": set()}
    scheduler.add_request(make_request(
        scheduler, "a", tokens("prompt:a", 0, 2),
        max_tokens=1, arrival_time=1.0))
    scheduler.add_request(make_request(
        scheduler, "b", tokens("prompt:b", 0, 8),
        max_tokens=8, arrival_time=2.0))
    run_async_step(scheduler, {}, state)  # step 0
    output = run_async_step(scheduler, {}, state)  # step 1
    # The reference model: a request could take a token but the step granted none.
    assert output.total_num_scheduled_tokens > 0, "step 1 scheduled nothing although a request could take a token"
