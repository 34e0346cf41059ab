# SPDX-License-Identifier: Apache-2.0
"""A token-budget counterexample for vLLM's scheduler: finding F4.

Trace: f4-vllm-adaptive-padded-admission-over-budget.json.

Finding F4 (SPEC.md): B = 5, draft_model with k = 4 (d = 1, L = 4). 'b' shares the 8-token
system prompt 'a' cached (two full blocks of 4) and has 1 token left, so vLLM pads its
admission to 1 + k = 5 rows; a waiting request may take at most min(T, B - d) = 4, and vLLM
prefers not to schedule rather than schedule un-padded (`break`). 'b' is never scheduled,
and nothing reports it; vLLM accepts the config, since 0.32 asks only B > d and 0.33 B > L.
The model and vLLM 0.32 agree on every step; vLLM 0.33 schedules the same.

The reference model reports progress: step 5: a request could take a token but the step
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


def create_scheduler(model_dir):
    """The deployment under test, on a fake OPT model written to model_dir (nothing is downloaded)."""
    hf_config = {
        "architectures": ["OPTForCausalLM"],
        "model_type": "opt",
        "vocab_size": VOCAB_SIZE,
        "max_position_embeddings": 64,
    }
    (model_dir / "config.json").write_text(json.dumps(hf_config))
    model_config = ModelConfig(
        model=str(model_dir), max_model_len=64, dtype="float16", seed=0, skip_tokenizer_init=True,
    )
    scheduler_config = SchedulerConfig(
        max_model_len=64,
        is_encoder_decoder=False,
        max_num_batched_tokens=5,
        max_num_scheduled_tokens=None,
        max_num_seqs=2,
        long_prefill_token_threshold=0,
        enable_chunked_prefill=True,
        policy="fcfs",
        async_scheduling=False,
    )
    parallel_config = ParallelConfig()
    speculative_config = SpeculativeConfig(
        method="ngram", num_speculative_tokens=4, parallel_drafting=False,
        target_model_config=model_config, target_parallel_config=parallel_config,
    )
    vllm_config = VllmConfig(
        model_config=model_config,
        cache_config=CacheConfig(block_size=4, enable_prefix_caching=True),
        parallel_config=parallel_config,
        scheduler_config=scheduler_config,
        speculative_config=speculative_config,
    )
    # No draft_model drafter is loaded: the config was validated as ngram; the scheduler reads only the
    # method's draft slots and lookahead, so set the method and re-run the budget check that reads them.
    speculative_config.method = "draft_model"
    speculative_config.parallel_drafting = False
    vllm_config._set_max_num_scheduled_tokens()
    num_blocks = 65  # 64 usable blocks and vLLM's null block
    spec = FullAttentionSpec(block_size=4, num_kv_heads=1, head_size=1, dtype=torch.float32)
    kv_cache_config = KVCacheConfig(
        num_blocks=num_blocks, kv_cache_tensors=[], kv_cache_groups=[KVCacheGroupSpec(["layer"], spec)]
    )
    vllm_config.cache_config.num_gpu_blocks = num_blocks
    return Scheduler(
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


def test_f4_vllm_adaptive_padded_admission_over_budget(tmp_path, monkeypatch):
    monkeypatch.setenv("VLLM_USE_V2_MODEL_RUNNER", "0")
    try:
        scheduler = create_scheduler(tmp_path)
    except ValueError as exc:
        print(f"vLLM refuses the deployment, so the bug cannot happen: {exc}")
        return
    scheduler.add_request(make_request(
        scheduler, "a", tokens("prefix:sys", 0, 8) + tokens("prompt:a", 8, 1),
        max_tokens=2, arrival_time=1.0))
    for _ in range(5):  # steps 0-4
        run_step(scheduler, {})
    scheduler.add_request(make_request(
        scheduler, "b", tokens("prefix:sys", 0, 8) + tokens("prompt:b", 8, 1),
        max_tokens=2, arrival_time=2.0))
    output = run_step(scheduler, {})  # step 5
    # The reference model: a request could take a token but the step granted none.
    assert output.total_num_scheduled_tokens > 0, "step 5 scheduled nothing although a request could take a token"
    for _ in range(31):  # steps 6-36
        run_step(scheduler, {})
    # The reference model: the drain ran past the progress bound; after 37 steps every request should have finished.
    assert scheduler.get_num_unfinished_requests() == 0, "requests left unfinished after the last step"
