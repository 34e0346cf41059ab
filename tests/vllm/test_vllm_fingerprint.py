"""The vLLM engine reads a pass at the cost of what it changed, and it reads the same as a whole read.

``VllmEngine.fingerprint`` counts the adds, aborts and passes that changed the scheduler;
it is pinned here against ``observe.fingerprint``, the whole state, on every pair of
consecutive steps. Each record's queues, block tables and shared blocks (read through the
engine's ``PassMemo``) are compared with the same reads made whole right after ``schedule()``.
"""
from __future__ import annotations

import random

import pytest
from vllm_support import F2_TRACE

from tokenbudget.harness.vllm import observe
from tokenbudget.harness.vllm.engine import VllmEngine
from tokenbudget.model.config import BudgetConfig
from tokenbudget.spec.trace import AddOp, StepOp, load_trace

pytestmark = [pytest.mark.vllm, pytest.mark.usefixtures("vllm_imported")]

SMALL_POOL = {"max_num_batched_tokens": 512, "max_num_seqs": 16, "num_speculative_tokens": 2, "method": "ngram",
              "num_kv_blocks": 120, "block_size": 16, "max_model_len": 1024}


def drive(engine, ops):
    """Apply ``ops`` (("add", kwargs), ("abort", id) or ("step", accepted)); per step: the
    record, the whole state before it, and the whole reads made right after its ``schedule()``."""
    sched, whole_reads, steps = engine.scheduler, [], []
    schedule = sched.schedule

    def schedule_and_read(*args, **kwargs):
        out = schedule(*args, **kwargs)
        running, waiting = observe.queues(sched)
        whole_reads.append((running, waiting, observe.blocks(sched, running)))
        return out

    sched.schedule = schedule_and_read
    for kind, arg in ops:
        if kind == "add":
            engine.add(**arg)
        elif kind == "abort":
            engine.abort(arg)
        else:
            state = observe.fingerprint(sched)
            steps.append((engine.step(arg).record, state, whole_reads[-1]))
    return steps


def random_ops(seed):
    """Adds (a third of them sharing a prefix), a few aborts and steps, then steps alone to drain."""
    rng, ops, n = random.Random(seed), [], 0
    for _ in range(250):
        if rng.random() < 0.3:
            ops.append(("add", {"rid": str(n), "prompt_len": rng.randint(1, 300), "max_tokens": rng.randint(1, 100),
                                "prefix_group": rng.choice([None, "a", "b"]), "prefix_len": rng.randint(0, 200)}))
            n += 1
        if n and rng.random() < 0.03:
            ops.append(("abort", str(rng.randrange(n))))
        ops.append(("step", {str(j): rng.randint(0, 2) for j in range(n)}))
    return ops + [("step", {})] * 200


def f2_ops():
    trace = load_trace(F2_TRACE)
    ops = [("add", {"rid": op.id, "prompt_len": op.prompt_len, "max_tokens": op.max_tokens}) if isinstance(op, AddOp)
           else ("step", dict(op.accepted)) for op in trace.ops if isinstance(op, (AddOp, StepOp))]
    return BudgetConfig.from_dict({k: v for k, v in trace.config.items() if k != "engine_version"}), ops


def runs():
    yield from ((BudgetConfig.from_dict(SMALL_POOL), random_ops(seed)) for seed in range(3))
    yield f2_ops()


def test_equal_fingerprints_mean_equal_states_and_the_memo_reads_as_a_whole_read() -> None:
    equal_pairs = shared_steps = 0
    for cfg, ops in runs():
        steps = drive(VllmEngine(cfg), ops)
        for (a, state_a, _), (b, state_b, _) in zip(steps, steps[1:]):
            assert (a.fingerprint == b.fingerprint) == (state_a == state_b), (a.step, b.step)
            equal_pairs += a.fingerprint == b.fingerprint
        for record, _, (running, waiting, (in_use, tables, shared)) in steps:
            assert (record.running, tuple(record.waiting), record.kv_blocks_in_use) == (running, waiting, in_use)
            assert record.block_tables == tables and record.block_keys == shared, record.step
            shared_steps += bool(shared)
    assert equal_pairs and shared_steps  # both sides of each rule were met
