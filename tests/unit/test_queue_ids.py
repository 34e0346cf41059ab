"""QueueIds behaves as the tuple of its ids; WaitingTally's counts stay those of the ids it
was given, however the windows move and whatever turns live or dead between them."""
from __future__ import annotations

import pickle
from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tokenbudget.spec.queue_ids import QueueIds, WaitingTally


def test_queue_ids_behave_as_the_tuple_of_their_ids():
    log = ["a", "b", "c", "d"]
    ids = QueueIds(log, 1, 3)
    log.append("e")  # the log grows; the window does not
    assert ids == ("b", "c") and ("b", "c") == ids and ids != ("b",) and ids == QueueIds(["b", "c"], 0, 2)
    assert len(ids) == 2 and bool(ids) and not QueueIds(log, 2, 2) and list(ids) == ["b", "c"]
    assert ids[0] == "b" and ids[-1] == "c" and ids[:1] == ("b",)
    with pytest.raises(IndexError):
        ids[2]
    assert "c" in ids and "a" not in ids and "e" not in ids
    assert ("a",) + ids == ("a", "b", "c") and ids + ("d",) == ("b", "c", "d") and hash(ids) == hash(("b", "c"))
    assert repr(ids) == "('b', 'c')" and pickle.loads(pickle.dumps(ids)) == ("b", "c")
    assert type(pickle.loads(pickle.dumps(ids))) is tuple


IDS = st.sampled_from("abcdef")
MOVES = st.lists(st.one_of(
    st.tuples(st.just("slide"), st.integers(0, 3), st.lists(IDS, max_size=3)),
    st.tuples(st.just("jump"), st.integers(0, 9), st.integers(0, 9)),
    st.tuples(st.just("new log"), st.lists(IDS, max_size=5)),
    st.tuples(st.just("tuple"), st.lists(IDS, max_size=5)),
    st.tuples(st.just("live"), IDS, st.booleans()),
), max_size=30)


@settings(max_examples=500, deadline=None)
@given(MOVES)
def test_the_tally_is_that_of_the_ids_it_was_given(moves):
    live: dict[str, int] = {}
    tally, log, start, ids = WaitingTally(live), [], 0, ()
    for move in moves:
        if move[0] == "live":
            _, rid, alive = move
            if alive != (rid in live):
                if alive:
                    live[rid] = 0
                else:
                    del live[rid]
                tally.liveness_changed(rid, alive)
        else:
            if move[0] == "slide":
                log += move[2]
                start, stop = min(start + move[1], len(log)), len(log)
            elif move[0] == "jump":
                start, stop = sorted((min(move[1], len(log)), min(move[2], len(log))))
            else:
                log, start, stop = list(move[1]), 0, len(move[1])
            ids = tuple(log[start:stop]) if move[0] == "tuple" else QueueIds(log, start, stop)
            tally.take(ids)
        counts = Counter(ids)
        assert tally.counts == counts
        assert tally.surplus == len(ids) - len(counts)
        assert tally.stale == sum(1 for rid in counts if rid not in live)
