"""The one way into a live vLLM scheduler: pure functions from a ``Scheduler`` (0.32 or 0.33)
and what its calls returned to the spec's records."""
from __future__ import annotations

import functools
import weakref
from dataclasses import dataclass, replace
from typing import AbstractSet, Any, Hashable, Iterable, Mapping, Optional, Sequence


from ...spec.grant_rules import kv_slots_needed
from ...spec.kv_groups import GroupTables, KvGroup
from ...spec.records import EncoderInput, RequestState, StepLimits, StepOutcome, StepRecord, pass_record
from ...spec.target import describe
from . import kv_groups
from .pass_memo import PassMemo

FULL_ATTENTION_SPECS = ("FullAttentionSpec", "MLAAttentionSpec")  # tables hold every slot a request writes
STATUS_QUEUES = {"RUNNING": "running", "FINISHED_ABORTED": "aborted"}  # other FINISHED_*: finished; else waiting


@dataclass(frozen=True)
class Scope:
    """What a scheduler's records are judged on. ``excluded`` maps an invariant id (or a
    named half of one) to why it is not judged on this scheduler."""

    excluded: Mapping[str, str]

    def applies(self, invariant: str) -> bool:
        return invariant not in self.excluded

    def lines(self) -> list[str]:
        return [f"{inv}: not judged ({why})" for inv, why in sorted(self.excluded.items())]


def scheduler_kind(sched: Any) -> str:
    """The class name of the scheduler (Scheduler, AsyncScheduler, DiffusionScheduler, ...)."""
    return type(sched).__name__


def kv_group(sched: Any) -> Optional[int]:
    """The index of the first full-attention KV cache group, None when there is none."""
    for index, group in enumerate(sched.kv_cache_config.kv_cache_groups):
        if type(group.kv_cache_spec).__name__ in FULL_ATTENTION_SPECS:
            return index
    return None


def is_diffusion(sched: Any) -> bool:
    return bool(getattr(sched.vllm_config.model_config, "is_diffusion", False))


def scope(sched: Any) -> Scope:
    """Which invariants apply to ``sched``'s records, and why each other one does not."""
    excluded: dict[str, str] = {}
    if not sched.kv_cache_config.kv_cache_groups:
        excluded["kv-capacity"] = "no KV cache group (an attention-free model)"
    else:
        groups = kv_groups.groups(sched)
        why_not = {f"kv-capacity (group {i})": g for i, g in enumerate(groups) if isinstance(g, str)}
        if len(why_not) == len(groups):
            excluded["kv-capacity"] = "no KV cache group judged: " + "; ".join(sorted(set(why_not.values())))
        else:
            excluded.update(why_not)
    if is_diffusion(sched):
        excluded["spec-shape"] = "diffusion: scheduled_spec_decode_tokens carry the canvas, not drafts"
    if getattr(sched, "is_encoder_decoder", False):
        excluded["model-len"] = "encoder-decoder: the decoder's length is not the prompt's"
        excluded["kv-capacity"] = "encoder-decoder: cross-attention KV is allocated apart from the decoder's"
        excluded["encoder-ready"] = "encoder-decoder: the encoder's output is cross-attention KV, not the encoder cache"
    elif getattr(sched, "ec_connector", None) is not None:
        excluded["encoder-ready"] = "an encoder-cache connector loads encoder outputs the scheduler's outputs do not show"
    return Scope(excluded)


def limits(sched: Any) -> StepLimits:
    """The deployment's limits as ``sched`` applies them: B, T (``max_num_scheduled_tokens``),
    S, k, d (``max_num_new_slots_for_drafting``), L (``num_lookahead_tokens``), the model
    length, the read KV group's block size and the usable pool (less vLLM's null block)."""
    spec = sched.vllm_config.speculative_config
    group = kv_group(sched)
    block_size = (sched.kv_cache_config.kv_cache_groups[group].kv_cache_spec.block_size
                  if group is not None else sched.block_size)
    return StepLimits(
        max_num_batched_tokens=sched.scheduler_config.max_num_batched_tokens,
        max_num_scheduled_tokens=sched.max_num_scheduled_tokens,
        max_num_seqs=sched.max_num_running_reqs,
        num_speculative_tokens=sched.num_spec_tokens,
        draft_slots=spec.max_num_new_slots_for_drafting if spec is not None else 0,
        lookahead=sched.num_lookahead_tokens,
        max_model_len=sched.max_model_len,
        block_size=block_size,
        num_kv_blocks=sched.kv_cache_manager.block_pool.num_gpu_blocks - 1,  # less vLLM's null block
        method=spec.method if spec is not None else None,
        sampled_tokens=getattr(sched, "num_sampled_tokens_per_step", 1),
        encoder_compute_budget=sched.max_num_encoder_input_tokens, encoder_cache_size=encoder_cache_size(sched),
    )


def queues(sched: Any, memo: Optional[PassMemo] = None) -> tuple[tuple[str, ...], Sequence[str]]:
    """The running ids, and the waiting ids (those holding KV blocks first, as vLLM serves them):
    a tuple, or with ``memo`` (the scheduler's, kept across its passes) a window of a log that
    costs what changed in the queue since the last pass."""
    running = tuple([r.request_id for r in sched.running])
    if memo is None:
        return running, tuple(r.request_id for queue in (sched.kv_holding_waiting, sched.waiting) for r in queue)
    memo.waiting.update([*sched.kv_holding_waiting, *sched.waiting])
    return running, memo.waiting.ids


def sizes(sched: Any) -> tuple[int, int, int, int]:
    """The lengths of the running, KV-holding and waiting queues, and the free blocks: O(1)."""
    return (len(sched.running), len(sched.kv_holding_waiting), len(sched.waiting),
            sched.kv_cache_manager.block_pool.get_num_free_blocks())


def blocks(sched: Any, running: tuple[str, ...], memo: Optional[PassMemo] = None
           ) -> tuple[int, dict[str, tuple[int, ...]], dict[int, object]]:
    """Usable blocks in use (cached free blocks count as free), the block table of each
    running request in the read KV group, and the hash of each block more than one holds;
    with ``memo``, at the cost of what the pass changed where it can (``PassMemo``)."""
    manager = sched.kv_cache_manager
    pool = manager.block_pool
    in_use = pool.num_gpu_blocks - 1 - pool.get_num_free_blocks()
    group = kv_group(sched)
    if group is None:
        return in_use, {}, {}
    read = memo.tables_and_shared(sched, group, running) if memo is not None else None
    if read is not None:
        return in_use, *read
    tables = {rid: tuple(manager.get_block_ids(rid)[group]) for rid in running}
    pool_blocks = pool.blocks
    shared: dict[int, object] = {
        b: pool_blocks[b].block_hash for table in tables.values() for b in table if pool_blocks[b].ref_cnt > 1}
    return in_use, tables, shared


_JUDGED: weakref.WeakKeyDictionary[Any, list[tuple[int, KvGroup]]] = weakref.WeakKeyDictionary()


def judged_groups(sched: Any) -> list[tuple[int, KvGroup]]:
    """The KV cache groups ``kv-capacity`` judges one by one (``kv_groups.judged``), read once per
    scheduler; empty where the one full-attention group of ``blocks`` is all there is."""
    coordinator = sched.kv_cache_manager.coordinator
    found = _JUDGED.get(coordinator)
    if found is None:
        found = _JUDGED[coordinator] = kv_groups.judged(sched) if kv_groups.beyond_one_full_group(sched) else []
    return found


def group_tables(sched: Any, running: tuple[str, ...]) -> tuple[tuple[GroupTables, ...], dict[int, object]]:
    """Each judged group's table of each running request (``judged_groups``; none where
    ``blocks``'s one table is all), with where a request's KV starts in a group that replays the
    window of a prefix hit (``Request.replay_start``), and the hash of each block more than one holds."""
    judged = judged_groups(sched)
    if not judged:
        return (), {}
    manager = sched.kv_cache_manager
    ids = {rid: manager.get_block_ids(rid) for rid in running}
    pool_blocks, null = manager.block_pool.blocks, manager.block_pool.null_block.block_id
    replayed = getattr(sched, "prefix_replay_group_ids", ())  # scheduler.py:293-297 (vLLM 0.32.0), :302 (0.33.0), :304 (0.34.0)
    starts = {rid: r.replay_start for rid in running if (r := sched.requests.get(rid)) is not None
              and int(getattr(r, "replay_start", 0)) > 0} if replayed else {}  # vllm/v1/request.py:207-209 (vLLM 0.32.0)
    out = tuple(GroupTables(group, {rid: tuple(held[index]) for rid, held in ids.items()},
                            starts if index in replayed else {}) for index, group in judged)
    shared: dict[int, object] = {b: pool_blocks[b].block_hash for _, tables, _ in out for table in tables.values()
                                 for b in table if b != null and pool_blocks[b].ref_cnt > 1}
    return out, shared


def fingerprint(sched: Any) -> Hashable:
    """The scheduler's whole state as a value: every queued request in queue order (its status,
    computed and output tokens, drafts, preemptions and KV blocks) and the free blocks.
    Costs the live requests; requests that finished are not read. ``VllmEngine.fingerprint``
    stands for it in O(1)."""
    manager = sched.kv_cache_manager
    group = kv_group(sched) or 0

    def state(r: Any, holds_blocks: bool) -> tuple[object, ...]:
        held = tuple(manager.get_block_ids(r.request_id)[group]) if holds_blocks else ()
        return (r.request_id, r.status, r.num_computed_tokens, r.num_output_tokens, len(r.spec_token_ids),
                r.num_preemptions, held)

    return (tuple(state(r, True) for r in sched.running),
            tuple(state(r, True) for r in sched.kv_holding_waiting),
            tuple(state(r, False) for r in sched.waiting),
            manager.block_pool.get_num_free_blocks())


PLAIN_STATUSES = ("RUNNING", "WAITING", "PREEMPTED")  # a request nothing outside the scheduler holds back


def progress_judged(sched: Any) -> Optional[str]:
    """Why the step half of ``progress`` is not judged on ``sched``, or None when it is: it
    is judged on vLLM's ``Scheduler`` and ``AsyncScheduler`` for a text-generation model with
    no KV connector, where nothing but the scheduler's own state decides whether a request
    gets a token."""
    if getattr(sched, "num_sampled_tokens_per_step", 1) != 1 or getattr(sched, "is_encoder_decoder", False):
        return "pooling, diffusion or encoder-decoder: not the modelled generation loop"
    if scheduler_kind(sched) not in ("Scheduler", "AsyncScheduler"):
        return f"{scheduler_kind(sched)}: a scheduler class the model does not follow"
    if getattr(sched, "decode_stagger", 1) != 1:
        return "pipeline-parallel decode stagger: a decode waits for its slot in the ring"
    if getattr(sched, "connector", None) is not None or getattr(sched, "ec_connector", None) is not None:
        return "a KV or encoder-cache connector: a transfer may hold a request back"
    if getattr(sched.scheduler_config, "prefill_schedule_interval", 1) > 1:  # 0.33: config/scheduler.py:203
        return "prefill_schedule_interval > 1: admissions wait for their cadence"
    return None


def progress_possible(sched: Any, lim: StepLimits) -> Optional[bool]:
    """The model's admission rule on the live state, read before ``schedule()``: could
    some request get a token this pass? A running request whose KV for one more token (and
    the lookahead the scheduler reserves with it) fits the free blocks, or, with a seat left, the head of the waiting
    queue, whose first token and whole sequence so far fit them (``tokenbudget/model/loop.py``'s
    ``_room_for_a_token``, ``_whole_sequence_fits``: the model's gate, whatever
    ``scheduler_reserve_full_isl`` says, since without it a request alone in the system, which
    the long-prefill threshold does not cut, must fit whole). Its first token is read as if
    every whole block before it were a prefix hit (under prefix caching): the most that token
    and its lookahead may take, since vLLM always takes its hits, so the answer is never yes
    where vLLM's pass could not admit it. None when it is not judged here
    (``progress_judged``, ``held_back``) or a request in question is held back by something
    outside the scheduler (a grammar, a transfer, multimodal input, streaming, a LoRA whose
    ``max_loras`` seats may be taken)."""
    if progress_judged(sched) is not None or held_back(sched) is not None:
        return None
    group = kv_group(sched)
    if group is None:
        return None
    manager = sched.kv_cache_manager
    free, size, max_len = manager.block_pool.get_num_free_blocks(), lim.block_size, lim.max_model_len
    reserved = lim.lookahead if lim.reserved_lookahead is None else lim.reserved_lookahead

    def plain(r: Any) -> bool:
        return (r.status.name in PLAIN_STATUSES and not r.mm_features and not r.use_structured_output
                and not getattr(r, "resumable", False) and r.lora_request is None)

    for r in sched.running:
        if not plain(r):
            return None
        if r.num_computed_tokens + 1 >= max_len or not wants_a_token(sched, r):
            continue
        held = len(manager.get_block_ids(r.request_id)[group])
        if -(-kv_slots_needed(r.num_computed_tokens, 1, reserved, max_len) // size) - held <= free:
            return True
    queue = sched.kv_holding_waiting or sched.waiting
    if not queue or len(sched.running) >= sched.max_num_running_reqs:
        return False
    head = queue.peek_request()
    if not plain(head):
        return None
    held = len(manager.get_block_ids(head.request_id)[group]) if queue is sched.kv_holding_waiting else 0
    start = head.num_computed_tokens
    if not held and getattr(manager, "enable_caching", False):  # as if every whole block before its last token hit
        start = max(start, (head.num_tokens - 1) // size * size)
    first = -(-kv_slots_needed(start, 1, reserved, max_len) // size) - held
    whole = -(-min(head.num_tokens, max_len) // size) - held
    return max(first, whole) <= free


def wants_a_token(sched: Any, r: Any) -> bool:
    """Whether the running pass would give ``r`` a token: tokens left past its in-flight ones
    (``num_output_placeholders``), and, under async, its in-flight tokens do not already
    finish it (vllm/v1/core/sched/scheduler.py:664-678 (vLLM 0.32.0)) and its decode is
    due (``next_decode_eligible_step``, scheduler.py:680; ``current_step`` counts at :592)."""
    placeholders = getattr(r, "num_output_placeholders", 0)
    if r.num_computed_tokens >= r.num_tokens_with_spec + placeholders:
        return False
    if placeholders > 0 and r.num_computed_tokens + 2 - placeholders >= r.num_prompt_tokens + r.max_tokens:
        return False
    return getattr(sched, "current_step", 0) + 1 >= getattr(r, "next_decode_eligible_step", 0)  # the pass counts first


def held_back(sched: Any) -> Optional[str]:
    """Why nothing may be scheduled now whatever the state, or None: the scheduler is paused
    (``pause_state``, vllm/v1/core/sched/interface.py:24-31 in 0.32.0), or a test double
    stands in for a method of its KV cache manager or block pool (an instance attribute
    over the class's method: a test forcing an allocation to fail)."""
    state = getattr(sched, "_pause_state", None)
    if state is not None and state.name != "UNPAUSED":
        return f"paused ({state.name})"
    for part in (sched.kv_cache_manager, sched.kv_cache_manager.block_pool):
        doubled = sorted(name for name in vars(part) if callable(getattr(type(part), name, None)))
        if doubled:
            return f"{type(part).__name__}.{doubled[0]} replaced"
    return None


def scheduled_requests(sched: Any, out: Any, preempted: Iterable[str]) -> dict[str, Any]:
    """The Request objects of a step (scheduled, then preempted), taken before the output is
    applied: a request that finishes in ``update_from_output`` leaves ``sched.requests``."""
    requests = sched.requests
    return {rid: requests[rid] for rid in (*out.num_scheduled_tokens, *preempted) if rid in requests}


def step_record(step: int, lim: StepLimits, sched: Any, out: Any, preempted: tuple[str, ...],
                fingerprint: Hashable = None, possible: Optional[bool] = None,
                memo: Optional[PassMemo] = None, encoder_held: Optional[AbstractSet[str]] = None) -> StepRecord:
    """The record of one ``schedule()`` that returned ``out``, read at once. ``preempted``:
    the requests it preempted, in order (``SchedulerOutput.preempted_req_ids`` is a set);
    ``possible``: ``progress_possible`` read before the pass; ``memo`` as for ``queues``;
    ``encoder_held``: the keys of the encoder outputs the runner holds as the step runs
    (the monitor keeps them); None: encoder inputs are not read."""
    grants: dict[str, int] = dict(out.num_scheduled_tokens)
    requests, d = sched.requests, lim.draft_slots
    computed, num_tokens, rows, prefill = {}, {}, {}, []
    for rid, n in grants.items():
        request = requests[rid]
        computed[rid] = before = request.num_computed_tokens - n
        num_tokens[rid] = tokens = request.num_tokens
        rows[rid] = n + d
        if before < tokens - 1:
            prefill.append(rid)
    if is_diffusion(sched):
        drafts: dict[str, int] = dict.fromkeys(grants, 0)
        padded: frozenset[str] = frozenset()
    else:
        spec_tokens = out.scheduled_spec_decode_tokens
        drafts = {rid: len(spec_tokens.get(rid, ())) for rid in grants}
        padded = frozenset(rid for rid, t in spec_tokens.items() if t and t.count(-1) == len(t))
    running, waiting = queues(sched, memo)
    in_use, tables, shared = blocks(sched, running, memo)
    groups, group_shared = group_tables(sched, running)
    inputs = () if encoder_held is None else encoder_inputs(sched, out, grants, computed)
    return pass_record(step, lim, grants, drafts, rows, computed, num_tokens, prefill, preempted, running, waiting,
                       in_use, tables, {**shared, **group_shared} if group_shared else shared, padded=padded,
                       progress_possible=possible, fingerprint=fingerprint, kv_groups=groups,
                       encoder_inputs=inputs, encoder_held=(e.key for e in inputs if e.key in (encoder_held or ())),
                       encoder_cache_used=encoder_cache_used(sched) if inputs or lim.encoder_cache_size else 0)


def samples(sched: Any, out: Any) -> frozenset[str]:
    """The requests a ``schedule()`` output samples a token for: those past their prefill."""
    return frozenset(rid for rid in out.num_scheduled_tokens if not sched.requests[rid].is_prefill_chunk)


def async_record(record: StepRecord, out: Any, running_before: Iterable[str], sampled_last: frozenset[str],
                 worker_keeps_drafts: bool) -> StepRecord:
    """An ``AsyncScheduler`` step's record: every decode's drafts are -1 placeholders, so the
    padded ones are those admitted in the pass; the stale ones are a running request's that
    the batch before did not sample, unless the worker keeps each request's drafts (Model
    Runner V2; SPEC.md §6 F9)."""
    before = frozenset(running_before)
    stale = frozenset() if worker_keeps_drafts else frozenset(
        rid for rid, drafts in out.scheduled_spec_decode_tokens.items()
        if drafts and rid in before and rid not in sampled_last)
    return replace(record, padded=frozenset(rid for rid in record.padded if rid not in before), stale_drafts=stale)


def encoder_inputs(sched: Any, out: Any, grants: Mapping[str, int], computed: Mapping[str, int]
                   ) -> tuple[EncoderInput, ...]:
    """The encoder inputs of the step's requests that it encodes (``scheduled_encoder_inputs``)
    or whose placeholder range its grant [computed, computed + grant) overlaps, with the
    embeddings the grant reads of each, counted as the runner gathers them
    (gpu_model_runner.py:3032-3050 (vLLM 0.32.0)). Costs the scheduled requests."""
    encoded, requests, found = out.scheduled_encoder_inputs, sched.requests, []
    for rid, grant in grants.items():
        features = requests[rid].mm_features
        if not features:
            continue
        start, end, mine = computed[rid], computed[rid] + grant, encoded.get(rid, ())
        for index, feature in enumerate(features):
            place = feature.mm_position
            lo, hi = max(start, place.offset), min(end, place.offset + place.length)
            if lo >= hi and index not in mine:
                continue
            first, last = place.get_embeds_indices_in_range(lo - place.offset, hi - place.offset) if lo < hi else (0, 0)
            found.append(EncoderInput(rid, index, feature.identifier, place.get_num_embeds(), last - first,
                                      index in mine))
    return tuple(found)


def with_encoder_limits(lim: StepLimits, sched: Any) -> StepLimits:
    """``lim`` with the encoder budget and cache size ``sched`` has now: a test may give a text
    model's scheduler an encoder after building it (vLLM's own, test_scheduler.py:4586-4587 (vLLM 0.32.0))."""
    budget, size = sched.max_num_encoder_input_tokens, encoder_cache_size(sched)
    if (budget, size) == (lim.encoder_compute_budget, lim.encoder_cache_size):
        return lim
    return replace(lim, encoder_compute_budget=budget, encoder_cache_size=size)


def encoder_cache_keys(sched: Any) -> set[str]:
    """The keys of the entries in the scheduler's encoder cache (none where the manager keeps none)."""
    return set(getattr(sched.encoder_cache_manager, "cached", ()))


def encoder_cache_size(sched: Any) -> int:
    """The encoder cache's size in embeddings (0 for a model without an encoder)."""
    return int(getattr(sched.encoder_cache_manager, "cache_size", 0))


def encoder_cache_used(sched: Any) -> int:
    """The embeddings the encoder cache holds after a pass: its entries, unreferenced ones
    included (they are evicted only for room); a manager that keeps no entries (the
    encoder-decoder one) by its free slots."""
    manager = sched.encoder_cache_manager
    sizes = getattr(manager, "num_embeds_by_hash", None)
    if sizes is None:
        return encoder_cache_size(sched) - manager.num_free_slots
    return sum(sizes.values())


def error_record(step: int, lim: StepLimits, sched: Any, preempted: tuple[str, ...], exc: BaseException,
                 fingerprint: Hashable = None, memo: Optional[PassMemo] = None) -> StepRecord:
    """The record of a ``schedule()`` that raised ``exc``: no grants, the queues and blocks
    as the exception left them."""
    running, waiting = queues(sched, memo)
    in_use, tables, shared = blocks(sched, running, memo)
    groups, group_shared = group_tables(sched, running)
    return pass_record(step, lim, {}, {}, {}, {}, {}, (), preempted, running, waiting, in_use, tables,
                       {**shared, **group_shared} if group_shared else shared, error=engine_error(exc),
                       fingerprint=fingerprint, kv_groups=groups)


def engine_error(exc: BaseException) -> str:
    """``Type: message (file:line in function)`` of an exception raised inside vLLM: the
    raising site names the function too, which a one-line change elsewhere in the file
    does not move (a crash's identity, ``fuzz.failures.identity``)."""
    tb = exc.__traceback__
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    text = describe(exc)
    return text if tb is None or not text.endswith(")") else f"{text[:-1]} in {tb.tb_frame.f_code.co_name})"


def request_state(request: Any) -> RequestState:
    """A vLLM request's observable state: its queue by status, token counts and max_tokens."""
    return RequestState(status_queue(request.status), request.num_computed_tokens, request.num_output_tokens,
                        request.max_tokens, request.num_prompt_tokens)


@functools.cache
def status_queue(status: Any) -> str:
    """The queue a request status stands for (an enum member: read once per member)."""
    name = status.name
    return STATUS_QUEUES.get(name) or ("finished" if name.startswith("FINISHED") else "waiting")


def outcome(step: int, requests: Mapping[str, Any], preempted: Iterable[str]) -> StepOutcome:
    """What applying step ``step``'s output left: the state of each of its requests."""
    return StepOutcome(step=step, requests={rid: request_state(r) for rid, r in requests.items()},
                       preempted=frozenset(preempted))
