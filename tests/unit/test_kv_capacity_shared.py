"""kv-capacity looks only at blocks held more than once, and judges them as the
whole-table walk it replaced did: same breaches, same order, on random block tables."""
from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from factories import good_record
from tokenbudget.spec import invariants as inv


def whole_table_ownership(rec):
    out = []
    owner = {}
    for rid, table in rec.block_tables.items():
        for index, block in enumerate(table):
            first = owner.setdefault(block, (rid, index))
            if first[0] == rid and first[1] == index:
                continue
            if block not in rec.block_keys or first[1] != index:
                out.append((rec.step, f"block {block} is owned by {first[0]} and {rid} without a shared prefix"))
    return out


TABLES = st.dictionaries(st.sampled_from("abcde"), st.lists(st.integers(0, 9), max_size=6).map(tuple), max_size=5)


@settings(max_examples=400, deadline=None)
@given(TABLES, st.sets(st.integers(0, 9)))
def test_ownership_breaches_match_the_whole_table_walk(tables, keyed):
    rec = good_record(num_scheduled_tokens={}, block_tables=tables, block_keys={b: ("k", b) for b in keyed},
                      kv_blocks_in_use=0)
    assert inv.kv_capacity.predicate(rec) == whole_table_ownership(rec)
