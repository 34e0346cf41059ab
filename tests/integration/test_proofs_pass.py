"""The prover's loop skeleton against the concrete loops (every built-in policy, so
``VllmLoop`` and ``FastDeployLoop``).

Random runs of a policy's loop stop before each ``schedule()``; the skeleton
(``proofs.pass_skeleton.run_pass``) runs the same pass on ints from a copy of the state,
its KV questions answered by the copy's real pool. Grants, drafts, runner rows,
padding, preemptions, the ledger and each restated invariant (``proofs.violations``)
must equal what ``SchedulerLoop.schedule`` and ``spec.check_step`` report.
"""
from __future__ import annotations

import copy
import random
from pathlib import Path

import pytest

from tokenbudget.model import (
    TABLES, BudgetConfig, ConfigError, OnePassLoop, SchedulerLoop, get_policy, scheduler_for,
)
from tokenbudget.model.request import Request, Status
from tokenbudget.proofs.pass_skeleton import PassConfig, PassResult, Slot, run_pass, scheduler_victim
from tokenbudget.proofs.symbolic import PROVED_VLLM_VERSION
from tokenbudget.model.fastdeploy.commits import commit_row
from tokenbudget.proofs.violations import VIOLATED
from tokenbudget.spec.corpus import corpus_paths
from tokenbudget.spec import StepRecord, check_step
from tokenbudget.spec.trace import AbortOp, AddOp, load_trace
from tokenbudget.proofs.loop_search import skeleton_policies

pytestmark = pytest.mark.proofs


class PoolKV:
    """The KVModel protocol on a real KVBlockPool (a copy of the loop's)."""

    def __init__(self, sched: SchedulerLoop, requests: list[Request]) -> None:
        self.pool, self.requests, self.block_size = sched.pool, requests, sched.cfg.block_size
        self.hit_blocks: dict[int, list[int]] = {}

    def running_fits(self, i: int, slots: int) -> bool:
        return self.pool.blocks_needed(self.requests[i], slots, []) <= self.pool.num_free

    def running_holds(self, i: int, slots: int) -> bool:
        return self.pool.blocks_needed(self.requests[i], slots, []) == 0

    def allocate_running(self, i: int, slots: int, cond: bool) -> None:
        if cond:
            assert self.pool.allocate(self.requests[i], slots, [])

    def hits(self, i: int) -> int:
        req = self.requests[i]
        self.hit_blocks[i] = self.pool.find_cached_prefix(req) if req.status is not Status.RUNNING else []
        return len(self.hit_blocks[i]) * self.block_size

    def admission_fits(self, i: int, hits: int, slots: int, whole: int) -> bool:
        req, blocks, free = self.requests[i], self.hit_blocks[i], self.pool.num_free
        return self.pool.blocks_needed(req, whole, blocks) <= free and self.pool.blocks_needed(req, slots, blocks) <= free

    def allocate_admission(self, i: int, hits: int, slots: int, cond: bool) -> None:
        if cond:
            assert self.pool.allocate(self.requests[i], slots, self.hit_blocks[i])

    def publish(self, i: int, tokens: int, cond: bool) -> None:
        if cond:
            self.pool.cache_full_blocks(self.requests[i], tokens)

    def preempt(self, i: int, cond: bool) -> None:
        if cond:
            self.pool.free(self.requests[i])


def skeleton_pass(sched: SchedulerLoop) -> tuple[PassResult, PassConfig, list[str]]:
    """The skeleton's pass over a copy of the loop's queues (running, then waiting)."""
    twin = copy.deepcopy(sched)
    requests = twin.running + twin.waiting
    slots = [Slot(True, r.status is Status.RUNNING, r.is_decoding, r.num_tokens, r.num_computed_tokens,
                  r.num_draft_tokens, r.priority, r.arrival) for r in requests]
    cfg = PassConfig(twin.policy, twin.params, twin.lookahead, twin.cfg.long_prefill_token_threshold,
                     twin.cfg.scheduling_policy == "priority", scheduler_victim, twin.need)
    return run_pass(cfg, slots, PoolKV(twin, requests)), cfg, [r.request_id for r in requests]


def assert_same(result: PassResult, cfg: PassConfig, ids: list[str], record: StepRecord) -> None:
    scheduled = [i for i, s in enumerate(result.scheduled) if s]
    assert {ids[i]: result.grant[i] for i in scheduled} == record.num_scheduled_tokens
    assert {ids[i]: result.drafts[i] for i in scheduled} == record.scheduled_draft_tokens
    assert {ids[i]: result.rows[i] for i in scheduled} == record.runner_rows
    assert {ids[i] for i in scheduled if result.padded[i]} == record.padded
    assert {ids[i] for i in scheduled if result.prefill[i]} == record.prefill
    assert {ids[i] for i, p in enumerate(result.preempted) if p} == set(record.preempted)
    assert {ids[i] for i, r in enumerate(result.running_after) if r} == set(record.running)
    assert (result.initial.token, result.initial.input) == (record.initial_token_budget, record.initial_input_budget)
    ledger = [(e.kind, e.before.token, e.after.token, e.before.input, e.after.input)
              for e in result.ledger if e.happened]
    assert ledger == [(e.kind, e.token_before, e.token_after, e.input_before, e.input_after) for e in record.ledger]
    spec = {v.invariant for v in check_step(record)}
    for name, violated in VIOLATED.items():
        assert bool(violated(cfg, result)) == (name in spec), name


def random_config(rng: random.Random, policy: str) -> BudgetConfig | None:
    k = rng.choice([0, 1, 2, 3])
    methods = sorted(TABLES[get_policy(policy).table])
    block = rng.choice([1, 2, 4])
    max_len = rng.randint(8, 40)
    knobs = dict(max_num_batched_tokens=rng.randint(2, 24), max_num_seqs=rng.randint(1, 5), num_speculative_tokens=k,
                 method=rng.choice(methods) if k else None, block_size=block, max_model_len=max_len,
                 num_kv_blocks=-(-max_len // block) + rng.randint(0, 6),
                 long_prefill_token_threshold=rng.choice([0, 0, rng.randint(1, max_len)]),
                 scheduling_policy=rng.choice(["fcfs", "priority"]), enable_chunked_prefill=rng.random() < 0.8,
                 enable_prefix_caching=rng.random() < 0.6)
    if k and rng.random() < 0.4:
        knobs["parallel_drafting"] = True
    if PROVED_VLLM_VERSION in get_policy(policy).versions:  # the skeleton follows 0.32's loop
        knobs["engine_version"] = PROVED_VLLM_VERSION
    try:
        cfg = BudgetConfig(**knobs)
        get_policy(policy).validate(cfg)
    except ConfigError:
        return None
    return cfg


def add_random_request(rng: random.Random, sched: SchedulerLoop) -> None:
    """Prompts of a shared prefix group (some one token past a block-aligned prefix, so that
    a prefix hit leaves one token and padding applies), priorities that later requests
    often beat (so that a victim may already be scheduled), short outputs."""
    cfg, rid = sched.cfg, f"r{len(sched.requests)}"
    if rng.random() < 0.5:
        prefix = min(cfg.block_size * rng.randint(1, 3), cfg.max_model_len - 2)
        prompt = prefix + 1 if rng.random() < 0.5 else rng.randint(prefix, cfg.max_model_len - 1)
        sched.add_request(rid, prompt, rng.randint(1, 8), rng.randint(0, 2), "g", prefix)
    else:
        sched.add_request(rid, rng.randint(1, cfg.max_model_len - 1), rng.randint(1, 8),
                          max(0, 3 - len(sched.requests) % 4))


def test_every_loop_is_compared() -> None:
    """The comparisons below run every built-in policy whose loop the skeleton follows: every
    such loop must have one, or the skeleton would follow a loop that nothing pins it to."""
    assert {get_policy(name).loop for name in skeleton_policies()} == {
        loop for loop in OnePassLoop.__subclasses__() if loop.skeleton_follows}


@pytest.mark.parametrize("policy", skeleton_policies())
def test_skeleton_pass_equals_the_scheduler(policy: str) -> None:
    rng = random.Random(policy)
    passes = 0
    while passes < 200:
        cfg = random_config(rng, policy)
        if cfg is None:
            continue
        sched = scheduler_for(cfg, get_policy(policy))
        for _ in range(rng.randint(1, 3)):
            add_random_request(rng, sched)
        for step in range(rng.randint(1, 14)):
            for _ in range(rng.choice([0, 0, 1, 2])):
                add_random_request(rng, sched)
            if sched.running and rng.random() < 0.05:
                sched.abort_request(rng.choice(sched.running).request_id)
            result, pass_cfg, ids = skeleton_pass(sched)
            record = sched.schedule()
            assert_same(result, pass_cfg, ids, record)
            passes += 1
            sched.update_from_output(record, {rid: rng.randint(0, cfg.num_speculative_tokens)
                                              for rid in record.num_scheduled_tokens})


def _accepted_corpus() -> list[Path]:
    """Corpus traces whose config their policy accepts (a refused one has no pass to compare)
    at an engine version and scheduler the skeleton follows (not a FastDeploy commit's block
    rules, not vLLM's async scheduler)."""
    out = []
    for path in corpus_paths():
        trace = load_trace(path)
        if trace.policy not in skeleton_policies():
            continue
        if commit_row(trace.config.get("engine_version")) is not None or trace.config.get("async_scheduling"):
            continue  # the skeleton has no step in flight: it follows vLLM's synchronous loop (SPEC.md §14)
        try:
            get_policy(trace.policy).validate(BudgetConfig.from_dict(trace.config))
        except ConfigError:
            continue
        out.append(path)
    return out


@pytest.mark.parametrize("path", _accepted_corpus(), ids=lambda p: p.stem)
def test_skeleton_pass_equals_the_scheduler_on_the_corpus(path: Path) -> None:
    """The corpus covers what random runs rarely reach: same-step refunds, padding, F1."""
    trace = load_trace(path)
    sched = scheduler_for(BudgetConfig.from_dict(trace.config), get_policy(trace.policy))
    for op in trace.ops:
        if isinstance(op, AddOp):
            sched.add_request(op.id, op.prompt_len, op.max_tokens, op.priority, op.prefix_group, op.prefix_len)
        elif isinstance(op, AbortOp):
            sched.abort_request(op.id)
        else:
            result, pass_cfg, ids = skeleton_pass(sched)
            record = sched.schedule()
            assert_same(result, pass_cfg, ids, record)
            sched.update_from_output(record, dict(op.accepted))
