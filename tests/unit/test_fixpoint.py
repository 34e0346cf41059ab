"""A fixpoint is a deadlock: the model's fingerprint, FastDeploy's paused decodes, the corpus shape.

The model's fingerprint is a count of the adds, aborts and passes that changed something
plus the loop's own counters (``SchedulerLoop.fingerprint``). It is pinned here against a
snapshot of the whole state (requests, queues, the KV pool, every plain attribute of the
loop) at the start of every step of every loop: two steps in a row, with no op between,
have equal fingerprints exactly when they started from equal states.
"""
from __future__ import annotations

import random
from dataclasses import replace
import sys
from pathlib import Path

from factories import SGLANG_ABORTS_LAST

from tokenbudget.model import BudgetConfig, get_policy
from tokenbudget.model.findings import explaining_finding
from tokenbudget.model.loop import SchedulerLoop
from tokenbudget.model.replay import replay_on_model
from tokenbudget.model.request import Request
from tokenbudget.model.target import ModelTarget
from tokenbudget.spec.corpus import corpus_paths
from tokenbudget.spec.execution import Execution
from tokenbudget.spec.invariants import ends_in_fixpoint, first_fixpoint
from tokenbudget.spec.trace import AbortOp, AddOp, StepOp, Trace, load_trace

CORPUS = Path(__file__).resolve().parents[2] / "tokenbudget" / "corpus"
FIXPOINT_TRACE = CORPUS / "fastdeploy-decode-count-full-batch-fixpoint.json"


def whole_state(loop: SchedulerLoop) -> tuple[object, ...]:
    """Everything a later pass can read: each request, the queues, the pool, the loop's plain attributes."""
    requests = tuple((r.request_id, r.status, r.num_computed_tokens, r.num_output_tokens, r.num_draft_tokens,
                      r.is_prefill_chunk, tuple(r.block_ids), r.num_cached_blocks, r.num_preemptions)
                     for r in loop.requests.values())
    pool = loop.pool
    blocks = (pool.next_fresh, tuple(pool.reuse_first), tuple(pool.free_queue), tuple(sorted(pool.ref_count.items())),
              tuple(sorted(pool.shared)), tuple(sorted(map(repr, pool.key_of.items()))),
              tuple(sorted(repr((key, tuple(copies))) for key, copies in pool.blocks_of_key.items())))
    plain = tuple(sorted((name, value.request_id if isinstance(value, Request) else value)
                         for name, value in vars(loop).items()
                         if isinstance(value, (int, float, bool, str, Request, type(None)))
                         and name not in ("num_steps", "state_changes", "refreshes")))  # reaches a pass only as the tree's clock does
    paused = tuple(sorted(getattr(loop, "worker_paused", ())))  # FastDeploy at a commit: the worker's pauses
    in_flight = getattr(loop, "in_flight", None)  # vLLM async: the placeholders and the step in flight
    flight = (tuple(sorted(getattr(loop, "placeholders", {}).items())),
              None if in_flight is None else (tuple(sorted(in_flight.record.num_scheduled_tokens.items())),
                                              tuple(sorted(in_flight.samples))))
    return (tuple(r.request_id for r in loop.running), tuple(r.request_id for r in loop.waiting), requests, blocks,
            plain, paused, radix_tree(loop), flight)


def radix_tree(loop: SchedulerLoop) -> tuple[object, ...]:
    """SGLang's radix cache up to its clock: every node's keys, blocks and locks, depth first,
    and the recency order of all but the root (``SglangLoop._loop_state`` says why the clock is left out)."""
    tree = getattr(loop, "tree", None)
    if tree is None:
        return ()
    nodes, stack = [], [tree.root]
    while stack:
        node = stack.pop()
        nodes.append(node)
        stack.extend(node.children[k] for k in sorted(node.children, key=repr))
    shape = tuple((tuple(map(repr, n.keys)), tuple(n.blocks), n.lock_ref) for n in nodes)
    return shape, tuple(sorted(range(1, len(nodes)), key=lambda i: nodes[i].time))


def random_ops(trace: Trace, rng: random.Random, count: int) -> list:
    """Adds (short, so that they fit), aborts of added ids and steps with random acceptance;
    runs of plain steps, so that drains and stalls are reached."""
    max_len = int(trace.config.get("max_model_len", BudgetConfig().max_model_len))
    k = int(trace.config.get("num_speculative_tokens", BudgetConfig().num_speculative_tokens))
    ops, ids = [], [op.id for op in trace.ops if isinstance(op, AddOp)]
    for n in range(count):
        roll = rng.random()
        if roll < 0.1:
            ids.append(f"x{n}")
            ops.append(AddOp(ids[-1], rng.randint(1, max(1, min(max_len - 1, 24))), rng.randint(1, 8)))
        elif roll < 0.13 and ids:
            ops.append(AbortOp(rng.choice(ids)))
        else:
            ops.append(StepOp({rid: rng.randint(0, k) for rid in ids}))
    return ops


SGLANG_STALL_CONFIG = dict(max_num_batched_tokens=64, max_num_seqs=8, num_speculative_tokens=2, method="eagle3",
                           block_size=1, num_kv_blocks=24, max_model_len=32)
SGLANG_STALL = Trace(  # a's prompt is cached; b0 shares it but never fits the pool (validation bypassed)
    policy="sglang-0.5.23", config=SGLANG_STALL_CONFIG, source="an SGLang stall on the radix cache",
    ops=[AddOp("a", 6, 1, prefix_group="g", prefix_len=6), StepOp({}),
         *[AddOp(f"b{i}", 8, 24, prefix_group="g", prefix_len=6) for i in range(3)], *[StepOp({})] * 40])


def runs_with_states():
    """(policy, fingerprints, states, events) of every corpus trace, continued by random ops;
    of sglang-0.5.23 (no corpus trace of its own) on an SGLang trace's config with the pool
    its validation asks; and of SGLANG_ABORTS_LAST, validation bypassed."""
    traces = [(load_trace(p), True) for p in corpus_paths()]
    sglang = next(t for t, _ in traces if t.policy == "sglang-v1-retract")
    traces.append((Trace(policy="sglang-0.5.23", config={**sglang.config, "num_kv_blocks": 20}, ops=sglang.ops,
                         source="sglang-0.5.23 on sglang-v1-retract's config"), True))
    traces.append((SGLANG_ABORTS_LAST, False))
    traces.append((SGLANG_STALL, False))
    traces += [(replace(t, config={**t.config, "engine_version": commit}, source=f"{t.source} at {commit}"), True)
               for t, _ in list(traces) for commit in getattr(get_policy(t.policy), "versions", ())
               if get_policy(t.policy).engine == "fastdeploy"]  # FastDeploy's block rules, by commit
    for index, (trace, validate) in enumerate(traces):
        try:
            target = ModelTarget(BudgetConfig.from_dict(trace.config), get_policy(trace.policy), validate=validate)
        except Exception:
            continue  # a refused config: nothing runs
        execution, states = Execution(target), []
        for op in [*trace.ops, *random_ops(trace, random.Random(index), 120)]:
            if execution.crashed is not None:
                break
            if isinstance(op, StepOp):
                states.append(whole_state(target.scheduler))
            try:
                execution.apply(op)
            except (ValueError, KeyError):
                continue  # an add the scheduler refuses (a prompt the engine takes not), or the abort of it
        SOURCES.append(str(trace.source))
        yield trace.policy, [rec.fingerprint for rec in execution.run.steps], states, execution.run.events


SOURCES: list[str] = []  # the traces run, in order
RUNS = list(runs_with_states())


def test_equal_fingerprints_mean_equal_states_on_every_loop():
    pairs = {True: 0, False: 0}
    for policy, fingerprints, states, events in RUNS:
        steps = [i for i, (event, _) in enumerate(events) if event == "step"]
        for (a, i), (b, j) in zip(enumerate(steps), enumerate(steps[1:], 1)):
            if j != i + 1 or b >= len(fingerprints):
                continue  # an op between: its own change
            same = fingerprints[a] == fingerprints[b]
            assert same == (states[a] == states[b]), (policy, a)
            pairs[same] += 1
    assert pairs[True] > 0 and pairs[False] > 0, pairs  # both kinds of pair were seen
    assert {get_policy(p).loop.__name__ for p, *_ in RUNS} == {"VllmLoop", "FastDeployLoop", "TrtllmLoop", "SglangLoop"}
    assert "sglang-0.5.23" in {p for p, *_ in RUNS}
    assert sum(" at " in source for source in SOURCES) >= 3  # FastDeploy's commits ran too


def test_the_fingerprint_costs_no_request():
    """O(1): the same size with 1 request live as with 40."""
    cfg = BudgetConfig(max_num_batched_tokens=64, max_num_seqs=4, block_size=4, num_kv_blocks=64, max_model_len=64,
                       num_speculative_tokens=2, method="ngram")
    loop = ModelTarget(cfg, get_policy("vllm-adaptive")).scheduler
    loop.add_request("a", 8, 4)
    one = loop.fingerprint()
    for n in range(40):
        loop.add_request(f"r{n}", 8, 4)
    assert sys.getsizeof(loop.fingerprint()) == sys.getsizeof(one) and loop.fingerprint() != one


def test_the_full_batch_stall_is_a_fixpoint_at_step_69():
    """FastDeploy #7499 at S = 32, B = 64: the fixpoint rule reports step 69, the step half
    counts the paused decodes (the pool holds their next blocks) from there on."""
    result = replay_on_model(load_trace(FIXPOINT_TRACE))
    assert result.ok
    fixpoints = [v for v in result.violations if "changed nothing" in v.message]
    assert [v.step for v in fixpoints] == [69] and "32 requests live" in fixpoints[0].message
    stalled = [v.step for v in result.violations if "could take a token" in v.message]
    assert stalled == list(range(69, 600))
    rec = result.run.steps[69]
    assert rec.paused == frozenset(rec.running) and len(rec.running) == 32 and rec.progress_possible
    assert rec.kv_blocks_in_use == 32 and rec.limits.num_kv_blocks == 256
    finding = explaining_finding(load_trace(FIXPOINT_TRACE), "progress")
    assert finding is not None and finding.id == "F5"  # F5's mechanism: every seat decoding, budget 0, all paused


def test_a_paused_decode_without_a_free_next_block_cannot_take_a_token():
    """The same stall with a pool that every request's one block fills: the step half no
    longer counts the paused decodes, the fixpoint rule still reports the deadlock."""
    trace = load_trace(FIXPOINT_TRACE)
    tight = Trace(policy=trace.policy, config={**trace.config, "num_kv_blocks": 32}, ops=trace.ops[:32 + 100],
                  expect=[], source="the full-batch stall on a pool of 32 blocks")
    run = replay_on_model(tight).run
    stall = next(rec.step for rec in run.steps if rec.step > 0 and not rec.num_scheduled_tokens)
    assert all(not rec.progress_possible for rec in run.steps[stall:])
    assert [step for step, _ in first_fixpoint(run)] == [stall]


def test_a_run_ends_in_a_fixpoint_once_the_step_after_it_shows_its_state_again():
    run = replay_on_model(load_trace(FIXPOINT_TRACE)).run
    head = type(run)(limits=run.limits, added=run.added, events=run.events[:32 + 70], steps=run.steps[:70],
                     outcomes=run.outcomes[:70])
    assert not ends_in_fixpoint(head)  # step 69 is not judged before step 70 shows its state again
    head.events.append(run.events[32 + 70])
    head.steps.append(run.steps[70])
    head.outcomes.append(run.outcomes[70])
    assert ends_in_fixpoint(head)


def test_the_step_half_counts_a_paused_decode_whose_next_block_is_free():
    """fastdeploy-decode-count-paused-decode: at step 1 'b' is paused, with free blocks."""
    run = replay_on_model(load_trace(CORPUS / "fastdeploy-decode-count-paused-decode.json")).run
    assert run.steps[1].paused == frozenset({"b"}) and run.steps[1].progress_possible


STALLS = [FIXPOINT_TRACE, CORPUS / "findings" / "f5-fastdeploy-spec-method-full-batch-deadlock.json",
          CORPUS / "findings" / "f2-vllm-adaptive-unchunked-draft-slots.json",
          CORPUS / "fastdeploy-decode-count-no-spec-deadlock.json"]


def test_replay_writes_the_steps_after_a_fixpoint_as_running_them_would():
    """Replay stops running the model at a fixpoint with only steps left and writes the rest
    as the fixpoint's record again: the run and its verdict are those of running every step."""
    from tokenbudget.spec import check_run

    for path in STALLS:
        trace = load_trace(path)
        built: list[ModelTarget] = []
        result = replay_on_model(trace, target_factory=lambda cfg, policy: built.append(ModelTarget(cfg, policy))
                                 or built[-1])
        assert built[0].scheduler.num_steps < len(result.run.steps)  # the model ran only up to the fixpoint
        execution = Execution(ModelTarget(BudgetConfig.from_dict(trace.config), get_policy(trace.policy)))
        for op in trace.ops:
            execution.apply(op)
        ran = execution.run
        assert result.ok and result.run is not None
        assert result.run.events == ran.events and result.run.outcomes == ran.outcomes, path.name
        assert result.run.steps == ran.steps, path.name
        assert list(result.violations) == check_run(ran), path.name


def test_an_sglang_stall_that_matches_the_waiting_head_each_step_is_a_fixpoint():
    """With the radix cache on, every pass matches the waiting head against the tree (its clock
    ticks) and asks for a waiting-prefix refresh; neither is in the fingerprint, the tree's
    recency order is: b0 never fits, so step 1 repeats for ever, across a refresh (one pass in 32).
    SGLang's arrival clip of max_new_tokens would let b0 fit; it is undone here (b's max_tokens back
    to 24), since the fingerprint, not the clip, is what is tested."""
    target = ModelTarget(BudgetConfig.from_dict(SGLANG_STALL.config), get_policy(SGLANG_STALL.policy), validate=False)
    execution = Execution(target)
    clock = None
    for op in SGLANG_STALL.ops:
        execution.apply(op)
        if isinstance(op, AddOp) and op.id.startswith("b"):
            target.scheduler.requests[op.id].max_tokens = op.max_tokens
        if clock is None and isinstance(op, AddOp) and op.id == "b2":
            clock = target.scheduler.tree.clock
    run = execution.run
    assert all(not rec.num_scheduled_tokens for rec in run.steps[1:]) and target.scheduler.tree.clock > clock + 40
    assert target.scheduler.refreshes > 32
    assert [step for step, _ in first_fixpoint(run)] == [1]
    assert len({rec.fingerprint for rec in run.steps[1:]}) == 1
