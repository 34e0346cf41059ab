"""QueueIds: the ids of a queue as a StepRecord holds them, a window of a log the steps share."""
from __future__ import annotations

from typing import Any, Iterator, Sequence, overload


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

