"""WaitingSnapshot: the waiting queue as a step reports it (its ids, its summed demand), kept at the cost of what changed."""
from __future__ import annotations

from typing import Optional

from ..spec.queue_ids import QueueIds
from . import decisions
from .request import Request


class WaitingSnapshot:
    """The waiting queue's ids (a ``QueueIds`` window of one growing log) and the sum of
    ``decisions.waiting_demand`` over it, updated from the queue seen at the last step.

    When the queue is that one less some requests at its head and plus some at its tail
    (admissions and arrivals: nearly every step), only those requests are read; any other
    change (a preemption to the front, a priority insert, an abort) reads the queue again
    and starts a new log. The list comparisons run in C, so a queue of thousands costs
    microseconds a step, and the records of a run share the log instead of each copying it.

    A demand term read once stays true because no loop changes the tokens of a request
    while it waits: they are set before it is queued and after it leaves
    (``tests/unit/test_waiting_snapshot.py`` pins this at every step of every loop).
    """

    def __init__(self) -> None:
        self.queue: list[Request] = []  # a copy of the queue seen last
        self.terms: list[int] = []  # its requests' demand terms, in order
        self.demand = 0
        self.log: list[str] = []  # ends with the queue's ids

    def update(self, waiting: list[Request]) -> None:
        """Take the queue as it is now."""
        gone = self._gone_from_head(waiting)
        if gone is None:
            self.terms = [self._term(r) for r in waiting]
            self.demand = sum(self.terms)
            self.log = [r.request_id for r in waiting]
        else:
            arrivals = waiting[len(self.queue) - gone:]
            arrived = [self._term(r) for r in arrivals]
            self.demand += sum(arrived) - sum(self.terms[:gone])
            self.terms = self.terms[gone:] + arrived
            self.log += [r.request_id for r in arrivals]
        self.queue = list(waiting)

    @property
    def ids(self) -> QueueIds:
        """The queue's ids, as the StepRecord holds them."""
        return QueueIds(self.log, len(self.log) - len(self.queue), len(self.log))

    def _gone_from_head(self, waiting: list[Request]) -> Optional[int]:
        """How many requests left the head of the queue seen last, when ``waiting`` is its
        rest followed by new arrivals; None when it changed otherwise."""
        queue = self.queue
        if not queue:
            return 0
        if not waiting:
            return len(queue)
        try:
            gone = queue.index(waiting[0])  # a Request compares by identity
        except ValueError:
            return None  # a new head: read it all again
        return gone if waiting[:len(queue) - gone] == queue[gone:] else None

    @staticmethod
    def _term(req: Request) -> int:
        return decisions.waiting_demand(req.num_tokens, req.num_computed_tokens)  # type: ignore[no-any-return]
