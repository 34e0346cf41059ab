"""KV cache groups: what a scheduled request's block table in a group of each kind must hold
after the pass (SPEC.md §2 `kv-capacity`, "One rule per KV cache group"). A table is
positional: block i holds slots [i * block_size, (i + 1) * block_size); a freed block is
the group's null block."""
from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple, Optional

FULL = "full attention"  # every slot written from slot 0 on
SLIDING_WINDOW = "sliding window"  # the window of the first slot written onwards: span w, plus `retained` below it
CHUNKED_LOCAL = "chunked local"  # the chunk (span c) of the first slot written onwards
MAMBA = "mamba"  # the last computed token's state onwards, and `extra_blocks` speculative states past the need


@dataclass(frozen=True)
class KvGroup:
    """One KV cache group: its kind, its own block size, the span of its window or chunk,
    the slots it keeps below its window, the state blocks it holds past the need, and the
    block id that stands for a freed block in its tables (None: it frees none)."""

    kind: str
    block_size: int
    span: int = 0
    retained: int = 0
    extra_blocks: int = 0
    null_block: Optional[int] = None


class GroupTables(NamedTuple):
    """A group and each live request's table in it."""

    group: KvGroup
    tables: dict[str, tuple[int, ...]]


def first_live_slot(group: KvGroup, computed: int) -> int:
    """The first slot the step reads or writes that the group keeps: the attention window,
    the chunk or the state of the first token written (at slot ``computed``)."""
    if group.kind == SLIDING_WINDOW:
        return max(0, computed - group.span + 1 - group.retained)
    if group.kind == CHUNKED_LOCAL:
        return computed // group.span * group.span
    if group.kind == MAMBA:
        return max(0, computed - 1)
    return 0


def blocks_needed(group: KvGroup, need: int) -> int:
    """How many blocks the table must reach to hold slots up to ``need``."""
    return -(-need // group.block_size) + group.extra_blocks


def shortfall(group: KvGroup, table: tuple[int, ...], computed: int, need: int) -> Optional[str]:
    """What ``table`` lacks of the live slots [first_live_slot, need), or None when it holds them
    all in real blocks."""
    size, reach = group.block_size, blocks_needed(group, need)
    if len(table) < reach:
        return f"holds {len(table) * size} KV slots ({len(table)} blocks of {reach} needed)"
    null = group.null_block
    if null is None:
        return None
    live = first_live_slot(group, computed)
    first = live // size
    if null not in table[first:reach]:
        return None
    index = table.index(null, first, reach)
    return f"has the null block at slots {index * size}-{(index + 1) * size - 1}, inside its live slots from {live}"
