"""kv-capacity over a record's KV cache groups: each kind keeps the slots its attention reads
from the first slot written on (full: all; sliding window: the window; chunked local: the
chunk; Mamba: the last state, plus its speculative blocks), a freed slot is the null block,
which no request owns."""
from __future__ import annotations

from dataclasses import replace

from factories import good_record
from tokenbudget.spec import invariants as inv
from tokenbudget.spec.kv_groups import CHUNKED_LOCAL, FULL, MAMBA, SLIDING_WINDOW, GroupTables, KvGroup, \
    first_live_slot

NULL = 99
FULL_GROUP = KvGroup(FULL, 4, null_block=NULL)
WINDOW = KvGroup(SLIDING_WINDOW, 4, span=8, null_block=NULL)


def test_each_kind_keeps_the_slots_its_attention_reads_from_the_first_written_on() -> None:
    assert first_live_slot(FULL_GROUP, 20) == 0
    assert first_live_slot(WINDOW, 20) == 13 and first_live_slot(WINDOW, 3) == 0
    assert first_live_slot(replace(WINDOW, retained=2), 20) == 11
    assert first_live_slot(KvGroup(CHUNKED_LOCAL, 4, span=8), 20) == 16
    assert first_live_slot(KvGroup(MAMBA, 4), 20) == 19 and first_live_slot(KvGroup(MAMBA, 4), 0) == 0


def record(window_tables: dict[str, tuple[int, ...]], group: KvGroup = WINDOW):
    """Request 0 computed 16 and granted 10 target rows (+ L 4: writes to slot 29, 8 blocks of 4),
    request 1 a fresh prefill of 4 (+ 4: 2 blocks); the full group sound, ``group`` as given."""
    full = {"0": tuple(range(8)), "1": (8, 9)}
    return good_record(computed_before={"0": 16, "1": 0}, block_tables=full, kv_blocks_in_use=20,
                       kv_groups=(GroupTables(FULL_GROUP, full), GroupTables(group, window_tables)))


def test_a_window_table_null_below_its_window_and_real_inside_it_holds() -> None:
    rec = record({"0": (NULL, NULL, 10, 11, 12, 13, 14, 15), "1": (20, 21)})
    assert inv.kv_capacity.predicate(rec) == []  # slots 9 on are live: blocks 2 on; the null block owned by none


def test_a_null_block_inside_the_window_is_a_breach_naming_the_group_and_the_slots() -> None:
    [(step, message)] = inv.kv_capacity.predicate(record({"0": (NULL, NULL, NULL, 11, 12, 13, 14, 15),
                                                          "1": (20, 21)}))
    assert message.startswith("0 holds the null block at slots 8-11 in its sliding window group, inside slots 9-29")


def test_a_null_block_in_a_full_attention_table_is_a_breach() -> None:
    full = {"0": (NULL, *range(1, 8)), "1": (8, 9)}
    rec = replace(record({"0": tuple(range(10, 18)), "1": (20, 21)}),
                  kv_groups=(GroupTables(FULL_GROUP, full), GroupTables(WINDOW, {"0": tuple(range(10, 18)),
                                                                                 "1": (20, 21)})))
    assert [m for _, m in inv.kv_capacity.predicate(rec)] == [
        "0 holds the null block at slots 0-3 in its full attention group, inside slots 0-29 the step reads or writes "
        "(computed 16 + granted 10 + drafter 4)"]


def test_a_window_table_one_block_short_and_a_real_block_in_two_tables_are_breaches() -> None:
    found = [m for _, m in inv.kv_capacity.predicate(record({"0": (NULL, NULL, 10, 11, 12, 13, 14), "1": (14, 21)}))]
    assert found == ["0 holds 28 KV slots in its sliding window group but the drafter writes to 30 "
                     "(computed 16 + granted 10 + drafter 4)",
                     "block 14 is owned by 0 and 1 without a shared prefix"]


def test_a_mamba_group_holds_its_speculative_blocks_past_the_target_rows_and_no_lookahead() -> None:
    mamba = KvGroup(MAMBA, 4, extra_blocks=2, null_block=NULL)
    sound = {"0": (NULL, NULL, NULL, 13, 14, 15, 16, 17, 18), "1": (20, 21, 22)}  # 26 slots: 7 blocks + 2
    assert inv.kv_capacity.predicate(record(sound, mamba)) == []
    short = {"0": (NULL, NULL, NULL, 13, 14, 15, 16, 17), "1": (20, 21, 22)}
    assert [m.split(" (")[0] for _, m in inv.kv_capacity.predicate(record(short, mamba))] == [
        "0 holds 32 KV slots in its mamba group but the step writes to 26"]


def test_a_window_rebuilt_from_a_replay_start_needs_no_block_below_that_start() -> None:
    tables = {"0": (NULL, NULL, NULL, NULL, 12, 13, 14, 15), "1": (20, 21)}  # slots 9-15 null: below the start
    replayed = replace(record(tables), kv_groups=(GroupTables(WINDOW, tables, {"0": 16}),))
    assert inv.kv_capacity.predicate(replayed) == []
    assert [m.split(",")[0] for _, m in inv.kv_capacity.predicate(record(tables))] == [
        "0 holds the null block at slots 8-11 in its sliding window group"]
