"""PacedCollector: Python's full garbage-collection passes paced by a long run of ops.

A replay keeps every record of its run and a fuzz session every draw Hypothesis made, and the
model makes almost no reference cycles, so the collector's automatic full passes re-walk a
growing heap of live objects (Python 3.11: 3 s of a 20,000-request replay's 26 s; 13% of a
fuzz run, which makes 29% more steps per second without them). Inside the context the young
generations are still collected as usual (cheap, and they free the short-lived cycles), the
automatic full passes are off, and the run makes one itself every FULL_EVERY ticks (an
op, a step), so the cycles a real engine's or a user policy's objects make are freed all the
same. It makes one sooner once the process's resident memory has grown by GROWTH bytes since
the last (read every CHECK_EVERY ticks): the objects of a fuzz example's real engine (SGLang's
request-to-token pool, as big as its config asks) form cycles that outlive the example, and a
session of small examples would pile them up, gigabytes, long before FULL_EVERY steps.
"""
from __future__ import annotations

import gc
import os
from types import TracebackType

FULL_EVERY = 50_000
GROWTH = 512 * 2**20  # resident bytes grown since the last full pass that make one
CHECK_EVERY = 64  # ticks between two readings of the resident memory
NO_FULL_PASS = 2**31 - 1  # the oldest generation's threshold: young collections only, never a full pass by itself


class PacedCollector:
    """A context: no automatic full collection inside it; after it, the thresholds as before."""

    def __init__(self) -> None:
        self.full_every = FULL_EVERY
        self.growth = GROWTH
        self.ticks = 0
        self.saved = (0, 0, 0)  # the thresholds found on entry

    def __enter__(self) -> PacedCollector:
        self.saved = gc.get_threshold()
        young, middle, _ = self.saved
        gc.set_threshold(young, middle, NO_FULL_PASS)
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 trace: TracebackType | None) -> None:
        gc.set_threshold(*self.saved)

    def tick(self) -> None:
        """One more op or step: a full collection when the count comes round, or when the
        resident memory has grown by ``growth`` bytes since the last."""
        self.ticks += 1
        if self.ticks % self.full_every == 0:
            self.collect()
        elif self.ticks % CHECK_EVERY == 0:
            resident = resident_bytes()
            if resident is not None and resident - _resident_after_full_pass(resident) >= self.growth:
                self.collect()

    def collect(self) -> None:
        """A full pass now."""
        gc.collect()
        _last_full_pass[0] = resident_bytes()


_last_full_pass: list[int | None] = [None]  # the resident bytes after this process's last paced full pass


def _resident_after_full_pass(now: int) -> int:
    """The resident bytes after the process's last paced full pass (a session runs many
    collectors, one a Hypothesis run: growth counts across them); ``now`` before any."""
    if _last_full_pass[0] is None:
        _last_full_pass[0] = now
    return _last_full_pass[0]


def resident_bytes() -> int | None:
    """The process's resident memory (Linux's ``/proc/self/statm``); None where it cannot be read."""
    try:
        with open("/proc/self/statm", "rb") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError, AttributeError):
        return None
