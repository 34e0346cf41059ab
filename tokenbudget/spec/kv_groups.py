"""KV cache groups: what a scheduled request's block table in a group of each kind must hold
after the pass (SPEC.md §2 `kv-capacity`, "One rule per KV cache group"). A table is
positional: block i holds slots [i * block_size, (i + 1) * block_size); a freed block is
the group's null block."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Mapping, NamedTuple, Optional

FULL = "full attention"
SLIDING_WINDOW = "sliding window"
CHUNKED_LOCAL = "chunked local"
MAMBA = "mamba"


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
    """A group and each live request's table in it; ``starts``: the slot a request's KV in
    this group starts at, where the step reads none below it (a prefix hit this group cannot
    share, its window rebuilt from there), else absent."""

    group: KvGroup
    tables: dict[str, tuple[int, ...]]
    starts: Mapping[str, int] = {}


class Kind(NamedTuple):
    """What a kind of group keeps: the first slot of a step that starts at slot ``computed``,
    and whether the drafter's L slots past the target rows are written to it."""

    first_live_slot: Callable[[KvGroup, int], int]
    drafter_writes: bool


KINDS = {
    FULL: Kind(lambda group, computed: 0, True),  # every slot from slot 0 on
    SLIDING_WINDOW: Kind(lambda group, computed: max(0, computed - group.span + 1 - group.retained), True),
    CHUNKED_LOCAL: Kind(lambda group, computed: computed // group.span * group.span, True),
    MAMBA: Kind(lambda group, computed: max(0, computed - 1), False),  # the last state; a drafter has no Mamba layers
}


def first_live_slot(group: KvGroup, computed: int) -> int:
    """The first slot a step starting at slot ``computed`` reads or writes that ``group`` keeps:
    the window, the chunk or the state of its first token."""
    return KINDS[group.kind].first_live_slot(group, computed)


def blocks_needed(group: KvGroup, need: int) -> int:
    """How many blocks the table must reach to hold slots up to ``need``."""
    return -(-need // group.block_size) + group.extra_blocks


def shortfall(group: KvGroup, table: tuple[int, ...], computed: int, need: int, writer: str, start: int = 0
              ) -> Optional[str]:
    """What ``table`` lacks of the live slots [max(first_live_slot, start), need) that ``writer``
    writes up to, as the rest of a sentence about its request; None when it holds them all in
    real blocks."""
    size, reach = group.block_size, blocks_needed(group, need)
    if len(table) < reach:
        return f"holds {len(table) * size} KV slots in its {group.kind} group but {writer} writes to {need}"
    null = group.null_block
    if null is None:
        return None
    live = max(first_live_slot(group, computed), start)
    first = live // size
    if null not in table[first:reach]:
        return None
    index = table.index(null, first, reach)
    return (f"holds the null block at slots {index * size}-{(index + 1) * size - 1} in its {group.kind} group, "
            f"inside slots {live}-{need - 1} the step reads or writes")
