"""QueueIds: the ids of a queue as a StepRecord holds them, a window of a log the steps share."""
from __future__ import annotations

from collections import Counter
from typing import Any, Iterator, Mapping, Optional, Sequence, overload


class QueueIds(Sequence[str]):
    """The ids ``log[start:stop]``, read only; ``log`` only ever grows, so a window stays true.

    A step's waiting queue is nearly always the last step's less some requests at its head
    and plus some at its tail, so the records of a run can share one log: a record then
    costs three fields, not a copy of a queue of thousands. It behaves as the tuple of its
    ids: equal (and hashed) as that tuple, ``+`` with a tuple gives a tuple, and it
    pickles and prints as that tuple.
    """

    __slots__ = ("_log", "_start", "_stop")

    def __init__(self, log: list[str], start: int, stop: int) -> None:
        assert 0 <= start <= stop <= len(log), (start, stop, len(log))
        self._log, self._start, self._stop = log, start, stop

    def __len__(self) -> int:
        return self._stop - self._start

    @overload
    def __getitem__(self, index: int) -> str: ...

    @overload
    def __getitem__(self, index: slice) -> tuple[str, ...]: ...

    def __getitem__(self, index: int | slice) -> str | tuple[str, ...]:
        if isinstance(index, slice):
            return tuple(self)[index]
        n = len(self)
        if not -n <= index < n:
            raise IndexError("QueueIds index out of range")
        return self._log[self._start + index % n]

    def __iter__(self) -> Iterator[str]:
        return iter(self._log[self._start:self._stop])

    def __contains__(self, rid: object) -> bool:
        try:
            self._log.index(rid, self._start, self._stop)  # type: ignore[arg-type]
        except ValueError:
            return False
        return True

    def __eq__(self, other: object) -> bool:
        if isinstance(other, QueueIds):
            if other._log is self._log and other._start == self._start and other._stop == self._stop:
                return True
            return len(other) == len(self) and tuple(other) == tuple(self)
        if isinstance(other, tuple):
            return len(other) == len(self) and other == tuple(self)
        return NotImplemented

    def __hash__(self) -> int:
        return hash(tuple(self))

    def __add__(self, other: Any) -> tuple[str, ...]:
        if isinstance(other, (tuple, QueueIds)):
            return tuple(self) + tuple(other)
        return NotImplemented

    def __radd__(self, other: Any) -> tuple[str, ...]:
        if isinstance(other, tuple):
            return other + tuple(self)
        return NotImplemented

    def __repr__(self) -> str:
        return repr(tuple(self))

    def __reduce__(self) -> tuple[Any, ...]:
        return (tuple, (tuple(self),))


class WaitingTally:
    """The waiting ids of a run's steps, tallied as they change: how many ids are held
    (``counts``), how many holdings repeat an id (``surplus``) and how many held ids are not
    in ``live`` (``stale``), with ``live`` read as it is when an id enters or leaves.

    A step whose waiting ids are a ``QueueIds`` window of the log of the last step's
    window, starting and ending no earlier and starting no later than it ended (requests
    left the head, arrivals joined the tail), costs the ids that left and entered; any other
    waiting sequence is tallied afresh (counted in C). The owner reports each change of an
    id's liveness (``liveness_changed``) so ``stale`` stays true between steps.
    """

    def __init__(self, live: Mapping[str, object]) -> None:
        self.live = live
        self.counts: dict[str, int] = {}
        self.surplus = 0
        self.stale = 0
        self.window: Optional[tuple[list[str], int, int]] = None  # (log, start, stop) of the tallied ids

    def take(self, waiting: Sequence[str]) -> None:
        """Tally ``waiting`` in place of the ids tallied last."""
        last = self.window
        if isinstance(waiting, QueueIds):
            log, start, stop = waiting._log, waiting._start, waiting._stop
            if last is not None and last[0] is log and last[1] <= start <= last[2] <= stop:
                for rid in log[last[1]:start]:
                    self._drop(rid)
                for rid in log[last[2]:stop]:
                    self._hold(rid)
                self.window = (log, start, stop)
                return
            self.window = (log, start, stop)
        else:
            self.window = None
        self.counts = Counter(waiting)
        self.surplus = len(waiting) - len(self.counts)
        self.stale = len(self.counts.keys() - self.live.keys())

    def liveness_changed(self, rid: str, live: bool) -> None:
        if rid in self.counts:
            self.stale += -1 if live else 1

    def _hold(self, rid: str) -> None:
        count = self.counts.get(rid, 0)
        self.counts[rid] = count + 1
        if count:
            self.surplus += 1
        elif rid not in self.live:
            self.stale += 1

    def _drop(self, rid: str) -> None:
        count = self.counts[rid]
        if count > 1:
            self.counts[rid] = count - 1
            self.surplus -= 1
            return
        del self.counts[rid]
        if rid not in self.live:
            self.stale -= 1
