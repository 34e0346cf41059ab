"""PacedCollector: no automatic full pass inside it, and one of its own once the resident
memory has grown by ``growth`` bytes: cyclic garbage that reached the oldest generation (a
finished fuzz example's engine objects) is freed long before FULL_EVERY ticks."""
from __future__ import annotations

import gc
import weakref

import pytest

from tokenbudget.spec.collector import CHECK_EVERY, NO_FULL_PASS, PacedCollector, resident_bytes

BLOCK = 16 * 2**20


class Node:
    """A cycle (it refers to itself) holding a resident buffer."""

    def __init__(self) -> None:
        self.me = self
        self.buffer = b"x" * BLOCK


def old_cyclic_garbage() -> weakref.ref[Node]:
    """A cycle promoted to the oldest generation while alive, then dropped: only a full pass frees it."""
    node = Node()
    gc.collect(1)
    return weakref.ref(node)


@pytest.mark.skipif(resident_bytes() is None, reason="no /proc/self/statm here")
def test_a_full_pass_frees_old_cycles_once_memory_grows() -> None:
    gc.collect()
    alive, most = [], 0
    with PacedCollector() as collector:
        assert gc.get_threshold()[2] == NO_FULL_PASS
        collector.growth = 4 * BLOCK
        collector.collect()  # the growth counts from here
        for _ in range(16):
            alive.append(old_cyclic_garbage())
            for _ in range(CHECK_EVERY):
                collector.tick()
            most = max(most, sum(ref() is not None for ref in alive))
    gc.collect()
    assert collector.ticks == 16 * CHECK_EVERY < collector.full_every
    assert most <= 6  # without the growth check all 16 (256 MB) stay until a full pass
