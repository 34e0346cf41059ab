"""A counterexample as a vLLM unit test: one self-contained pytest file."""
from __future__ import annotations

import json
import re
import textwrap
from pathlib import Path

from ...model import BudgetConfig, ConfigError, get_policy
from ...model.base_gap import base_policy
from ...model.findings import explaining_finding
from ...model.methods import VLLM_0_32
from ...model.replay import BadInput, replay_on_model
from ...spec.corpus import CORPUS_DIR
from ...spec.invariants import INVARIANTS, Breach, Violation
from ...spec.trace import AbortOp, AddOp, StepOp, Trace
from .engine import FAKE_ARCHITECTURE, VOCAB_SIZE
from .target import VLLM_POLICY

VLLM_TESTS_DIR = CORPUS_DIR / "vllm_tests"  # the exported test of each vLLM finding
EXPORTED_STEP_INVARIANTS = ("token-cap", "seq-cap", "spec-shape")  # asserted on every step's output
EXPORTED_INVARIANTS = (*EXPORTED_STEP_INVARIANTS, "progress")
WIDTH = 92
# Judged on vLLM by the pytest plugin's monitor, not by an assert of the test: exported with that note.
PLUGIN_JUDGED = frozenset({"input-rows-cap", "input-budget-nonnegative"})


def exported_test_name(trace_file: str | Path) -> str:
    """The file name of a trace's exported test: ``test_<stem>.py``, the stem made an identifier."""
    return f"test_{_identifier(Path(trace_file).stem)}.py"


def export_vllm_test(trace: Trace) -> str:
    """The pytest file for ``trace``, of vllm-adaptive or of a user policy derived from it
    (a change to vLLM's accounting: the test fails on a vLLM that makes it). Raises BadInput
    (one line naming the trace) for another policy, a config refused on the model, a run
    that violates nothing, or a violation this exporter has no assert for."""
    if trace.policy != VLLM_POLICY and _base_of(trace) != VLLM_POLICY:
        raise BadInput(f"{trace.source}: export --vllm-test needs a {VLLM_POLICY} trace (vLLM's own accounting) or "
                       f"one of a policy derived from it, not {trace.policy}")
    result = replay_on_model(trace)
    if result.run is None:
        raise BadInput(f"{trace.source}: the model refuses the config, so there is no step to export")
    if not result.violations:
        raise BadInput(f"{trace.source}: the trace violates no invariant on the model; export writes tests "
                       "for counterexamples")
    other = sorted({v.invariant for v in result.violations} - set(EXPORTED_INVARIANTS) - PLUGIN_JUDGED)
    if other:
        raise BadInput(f"{trace.source}: export has no vLLM assert for {', '.join(other)}; it writes "
                       f"{', '.join(EXPORTED_INVARIANTS)} (and {', '.join(sorted(PLUGIN_JUDGED))} under "
                       "pytest --tokenbudget=strict)")
    cfg = BudgetConfig.from_dict(trace.config)
    finding = explaining_finding(trace, result.violations[0].invariant)
    name = Path(trace.source).name
    progress = INVARIANTS["progress"]
    stalls = [breach for rec in result.run.steps for breach in progress.predicate(rec)]
    assert progress.run_predicate is not None  # progress judges whole runs too
    drains = bool(progress.run_predicate(result.run))
    parts = [
        _header(trace, name, finding.id if finding else None, result.violations),
        _IMPORTS,
        _create_scheduler(cfg),
        _HELPERS.format(vocab=VOCAB_SIZE),
        _test_body(trace, name, stalls[0] if stalls else None, drains),
    ]
    return "\n\n\n".join(parts)


def _base_of(trace: Trace) -> str | None:
    """The built-in policy the trace's policy derives from; None for an unknown policy."""
    try:
        return base_policy(get_policy(trace.policy))
    except ConfigError:
        return None


def _literal(value: object) -> str:
    """A Python literal of a str or a str -> int map, in double quotes (JSON's escapes are Python's)."""
    return json.dumps(value)


def _identifier(text: str) -> str:
    return re.sub(r"[^0-9a-z]+", "_", text.lower()).strip("_") or "trace"


def _docstring(text: str) -> str:
    """``text`` made safe inside a triple-quoted string: printable characters only, no escapes."""
    text = "".join(ch if ch.isprintable() else " " for ch in text)
    return text.replace("\\", "\\\\").replace('"', '\\"')


def _wrap(text: str, indent: str = "") -> list[str]:
    # Unbroken words: a line cut inside an escape would change the text.
    return textwrap.wrap(_docstring(text), WIDTH - len(indent), initial_indent=indent, subsequent_indent=indent,
                         break_long_words=False, break_on_hyphens=False)


def _header(trace: Trace, name: str, finding: str | None, violations: tuple[Violation, ...]) -> str:
    about = f": finding {finding}" if finding else ""
    first = violations[0]
    lines = ["# SPDX-License-Identifier: Apache-2.0",
             f'"""A token-budget counterexample for vLLM\'s scheduler{about}.', "",
             *_wrap(f"Trace: {name}."), ""]
    if trace.description:
        lines += [*_wrap(trace.description), ""]
    lines += _wrap(f"The reference model reports {first}.")
    if first.invariant in PLUGIN_JUDGED:
        lines += ["", *_wrap(f"{first.invariant} has no assert here: run this test under pytest "
                             "--tokenbudget=strict (tokenbudget's pytest plugin), whose monitor judges it on "
                             "every step vLLM schedules.")]
    lines += ["", *_wrap("Exported by tokenbudget (export --vllm-test): self-contained, it needs only vLLM and "
                         "pytest. It fails where vLLM has the bug, and passes where vLLM schedules the same "
                         "requests without breaking the asserts or refuses the deployment."), '"""']
    return "\n".join(lines)


_IMPORTS = '''import json
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
from vllm.v1.structured_output import StructuredOutputManager'''


def _create_scheduler(cfg: BudgetConfig) -> str:
    k = cfg.num_speculative_tokens
    lines = [
        "def create_scheduler(model_dir):",
        '    """The deployment under test, on a fake OPT model written to model_dir (nothing is downloaded)."""',
        "    hf_config = {",
        f'        "architectures": ["{FAKE_ARCHITECTURE}"],',
        '        "model_type": "opt",',
        '        "vocab_size": VOCAB_SIZE,',
        f'        "max_position_embeddings": {cfg.max_model_len},',
        "    }",
        '    (model_dir / "config.json").write_text(json.dumps(hf_config))',
        "    model_config = ModelConfig(",
        f'        model=str(model_dir), max_model_len={cfg.max_model_len}, dtype="float16", seed=0, '
        "skip_tokenizer_init=True,",
        "    )",
        "    scheduler_config = SchedulerConfig(",
        f"        max_model_len={cfg.max_model_len},",
        "        is_encoder_decoder=False,",
        f"        max_num_batched_tokens={cfg.max_num_batched_tokens},",
        f"        max_num_scheduled_tokens={cfg.max_num_scheduled_tokens},",
        f"        max_num_seqs={cfg.max_num_seqs},",
        f"        long_prefill_token_threshold={cfg.long_prefill_token_threshold},",
        f"        enable_chunked_prefill={cfg.enable_chunked_prefill},",
        f"        policy={_literal(cfg.scheduling_policy)},",
        "        async_scheduling=False,",
        "    )",
        "    parallel_config = ParallelConfig()",
    ]
    if k:
        lines += [
            "    speculative_config = SpeculativeConfig(",
            f'        method="ngram", num_speculative_tokens={k}, parallel_drafting={cfg.parallel_drafting},',
            "        target_model_config=model_config, target_parallel_config=parallel_config,",
            "    )",
        ]
    else:
        lines.append("    speculative_config = None")
    lines += [
        "    vllm_config = VllmConfig(",
        "        model_config=model_config,",
        f"        cache_config=CacheConfig(block_size={cfg.block_size}, "
        f"enable_prefix_caching={cfg.enable_prefix_caching}),",
        "        parallel_config=parallel_config,",
        "        scheduler_config=scheduler_config,",
        "        speculative_config=speculative_config,",
        "    )",
    ]
    if k and cfg.method != "ngram":
        assert cfg.method is not None  # a speculative config names its method
        parallel = cfg.parallel_drafting or VLLM_0_32[cfg.method].parallel_only
        lines += [
            f"    # No {cfg.method} drafter is loaded: the config was validated as ngram; the scheduler reads only the",
            "    # method's draft slots and lookahead, so set the method and re-run the budget check that reads them.",
            f"    speculative_config.method = {_literal(cfg.method)}",
            f"    speculative_config.parallel_drafting = {parallel}",
            "    vllm_config._set_max_num_scheduled_tokens()",
        ]
    lines += [
        f"    num_blocks = {cfg.num_kv_blocks + 1}  # {cfg.num_kv_blocks} usable blocks and vLLM's null block",
        f"    spec = FullAttentionSpec(block_size={cfg.block_size}, num_kv_heads=1, head_size=1, dtype=torch.float32)",
        "    kv_cache_config = KVCacheConfig(",
        '        num_blocks=num_blocks, kv_cache_tensors=[], kv_cache_groups=[KVCacheGroupSpec(["layer"], spec)]',
        "    )",
        "    vllm_config.cache_config.num_gpu_blocks = num_blocks",
        "    return Scheduler(",
        "        vllm_config=vllm_config,",
        "        kv_cache_config=kv_cache_config,",
        "        structured_output_manager=StructuredOutputManager(vllm_config),",
        f"        block_size={cfg.block_size},",
        "        log_stats=False,",
        "    )",
    ]
    return "\n".join(lines)


_HELPERS = '''VOCAB_SIZE = {vocab}


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
        f"{{output.total_num_scheduled_tokens}} tokens scheduled, budget {{scheduler.max_num_scheduled_tokens}}")
    assert len(output.num_scheduled_tokens) <= scheduler.max_num_running_reqs
    for request_id, drafts in output.scheduled_spec_decode_tokens.items():
        assert len(drafts) <= scheduler.num_spec_tokens, f"{{request_id}}: {{len(drafts)}} drafts"
        assert output.num_scheduled_tokens[request_id] == 1 + len(drafts), (
            f"{{request_id}}: {{output.num_scheduled_tokens[request_id]}} tokens with {{len(drafts)}} drafts")


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
        req_ids=req_ids, req_id_to_index={{r: i for i, r in enumerate(req_ids)}}, sampled_token_ids=sampled)
    scheduler.update_from_output(output, runner_output)
    if draft_req_ids:
        scheduler.update_draft_token_ids(DraftTokenIds(req_ids=draft_req_ids, draft_token_ids=draft_token_ids))
    return output'''


def _test_body(trace: Trace, name: str, stall: Breach | None, drains: bool) -> str:
    """The test function; ``stall`` is the first step half of ``progress`` the model
    reports, ``drains`` whether it reports the run half."""
    lines = [
        f"def test_{_identifier(Path(name).stem)}(tmp_path, monkeypatch):",
        '    monkeypatch.setenv("VLLM_USE_V2_MODEL_RUNNER", "0")',
        "    try:",
        "        scheduler = create_scheduler(tmp_path)",
        "    except ValueError as exc:",
        "        print(f\"vLLM refuses the deployment, so the bug cannot happen: {exc}\")",
        "        return",
    ]
    step, arrivals, index = 0, 0, 0
    ops = trace.ops
    while index < len(ops):
        op = ops[index]
        if isinstance(op, AddOp):
            arrivals += 1
            lines.append(_add(op, arrivals))
            index += 1
        elif isinstance(op, AbortOp):
            lines.append(f"    scheduler.finish_requests({_literal(op.id)}, RequestStatus.FINISHED_ABORTED)")
            index += 1
        else:
            run = _same_steps(ops, index, step, stall[0] if stall else None)
            accepted = _literal(dict(sorted(op.accepted.items())))
            if stall is not None and step == stall[0]:
                lines += [f"    output = run_step(scheduler, {accepted})  # step {step}",
                          f"    # The reference model: {_docstring(stall[1])}.",
                          "    assert output.total_num_scheduled_tokens > 0, "
                          f"\"step {step} scheduled nothing although a request could take a token\""]
            elif run == 1:
                lines.append(f"    run_step(scheduler, {accepted})  # step {step}")
            else:
                lines += [f"    for _ in range({run}):  # steps {step}-{step + run - 1}",
                          f"        run_step(scheduler, {accepted})"]
            step += run
            index += run
    if drains:
        lines += [f"    # The reference model: the drain ran past the progress bound; after {step} steps every request "
                  "should have finished.",
                  "    assert scheduler.get_num_unfinished_requests() == 0, "
                  "\"requests left unfinished after the last step\""]
    return "\n".join(lines) + "\n"


def _add(op: AddOp, arrival: int) -> str:
    shared = min(op.prefix_len, op.prompt_len) if op.prefix_group is not None else 0
    prompt = f"tokens({_literal('prompt:' + op.id)}, {shared}, {op.prompt_len - shared})"
    if shared:
        prompt = f"tokens({_literal('prefix:' + str(op.prefix_group))}, 0, {shared}) + " + prompt
    priority = f", priority={op.priority}" if op.priority else ""
    return (f"    scheduler.add_request(make_request(\n        scheduler, {_literal(op.id)}, {prompt},\n"
            f"        max_tokens={op.max_tokens}, arrival_time={float(arrival)}{priority}))")


def _same_steps(ops: tuple, index: int, step: int, stall_step: int | None) -> int:
    """How many step ops from ``index`` on have the accepted map of the first; the stall
    step stands alone."""
    if step == stall_step:
        return 1
    run = 1
    while (index + run < len(ops) and isinstance(ops[index + run], StepOp)
           and ops[index + run].accepted == ops[index].accepted and step + run != stall_step):
        run += 1
    return run
