"""The waiting queue kept from step to step reports what reading the whole queue would:
its ids (windows of a shared log, each still true after later steps) and its summed
demand, on random queue edits and at every step of every built-in loop (each policy,
random configs, arrivals with priorities and shared prefixes, aborts, acceptances,
preemptions)."""
from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tokenbudget.fuzz.config_strategies import configs
from tokenbudget.model import decisions
from tokenbudget.model.loop import scheduler_for
from tokenbudget.model.registry import builtin_policies
from tokenbudget.model.request import Request
from tokenbudget.model.waiting_snapshot import WaitingSnapshot


def summed_whole(waiting):
    return sum(decisions.waiting_demand(r.num_tokens, r.num_computed_tokens) for r in waiting)


EDITS = st.lists(st.tuples(st.sampled_from(("arrive", "admit", "front", "remove", "insert", "sum")),
                           st.integers(0, 50)), max_size=40)


@settings(max_examples=300, deadline=None)
@given(EDITS)
def test_equals_the_whole_queue_after_any_edits(edits):
    snapshot, queue, made, windows = WaitingSnapshot(), [], 0, []
    for edit, n in edits:
        if edit in ("arrive", "front", "insert"):
            made += 1
            req = Request(f"r{made}", 1 + n, 5, made)
            req.num_computed_tokens = n // 3
            index = {"arrive": len(queue), "front": 0, "insert": n % (len(queue) + 1)}[edit]
            queue.insert(index, req)
        elif edit == "admit":
            del queue[:n % 4]
        elif edit == "remove" and queue:
            del queue[n % len(queue)]
        snapshot.update(queue)
        assert snapshot.demand == summed_whole(queue)
        windows.append((snapshot.ids, tuple(r.request_id for r in queue)))
    assert [ids for ids, _ in windows] == [want for _, want in windows]


def whole_unserved(loop):
    """The unserved demand summed over both queues every step, as the loop did before it kept the waiting sum."""
    queued = loop.running + loop.waiting
    running = [True] * len(loop.running) + [False] * len(loop.waiting)
    return decisions.unserved_demand(loop.cfg.max_num_seqs, running, [not r for r in running],
                                     [r.num_tokens for r in queued], [r.num_draft_tokens for r in queued],
                                     [r.num_computed_tokens for r in queued])


OPS = st.lists(st.one_of(
    st.tuples(st.just("add"), st.integers(1, 600), st.integers(1, 40), st.integers(0, 2), st.booleans()),
    st.tuples(st.just("abort"), st.integers(0, 1000)),
    st.tuples(st.just("step"), st.integers(0, 4)),
    st.tuples(st.just("step"), st.integers(0, 4)),
), min_size=1, max_size=60)


@pytest.mark.parametrize("name", list(builtin_policies()))
@settings(max_examples=25, deadline=None)
@given(data=st.data())
def test_every_loop_reports_the_whole_queue_at_every_step(name, data):
    policy = builtin_policies()[name]()
    cfg = data.draw(configs(policy, scales=("small",)), label="config")
    loop = scheduler_for(cfg, policy)
    added, records = [], []
    for op in data.draw(OPS, label="ops"):
        if op[0] == "add":
            _, prompt, max_tokens, priority, shared = op
            prompt = min(prompt, policy.loop.longest_prompt(cfg))
            loop.add_request(f"r{len(added)}", prompt, max_tokens, priority, "sys" if shared else None,
                             min(prompt, 2 * cfg.block_size) if shared else 0)
            added.append(f"r{len(added)}")
        elif op[0] == "abort" and added:
            loop.abort_request(added[op[1] % len(added)])
        elif op[0] == "step":
            record = loop.schedule()
            assert record.unserved_demand == whole_unserved(loop), record.step
            assert record.waiting == tuple(r.request_id for r in loop.waiting), record.step
            records.append((record, record.waiting, tuple(record.waiting)))
            loop.update_from_output(record, {rid: op[1] for rid in record.num_scheduled_tokens})
    assert all(record.waiting is ids and ids == want for record, ids, want in records)
