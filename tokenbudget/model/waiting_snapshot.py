"""WaitingSnapshot: the waiting queue as a step reports it (its ids, its summed demand), kept at the cost of what changed."""
from __future__ import annotations

from collections import deque
from typing import Optional

from ..spec.queue_ids import QueueIds
from . import decisions
from .request import Request


class WaitingSnapshot:
    """The waiting queue's ids (a ``QueueIds`` window of one growing log) and the sum of
    ``decisions.waiting_demand`` over it, updated from the queue seen at the last step."""

    def __init__(self) -> None:
        self.queue: list[Request] = []  # a copy of the queue seen last
        self.terms: deque[int] = deque()  # its requests' demand terms, in order
        self.demand = 0
        self.log: list[str] = []  # ends with the queue's ids

    def update(self, waiting: list[Request]) -> None:
        """Take the queue as it is now."""
        gone = self._follow(waiting)
        if gone is None:
            self.terms = deque(map(self._term, waiting))
            self.demand = sum(self.terms)
            self.log = [r.request_id for r in waiting]
            self.queue = list(waiting)
            return
        terms, demand = self.terms, self.demand
        for _ in range(gone):
            demand -= terms.popleft()
        arrivals = waiting[len(terms):]
        arrived = list(map(self._term, arrivals))
        terms.extend(arrived)
        self.demand = demand + sum(arrived)
        self.log += [r.request_id for r in arrivals]

    @property
    def ids(self) -> QueueIds:
        """The queue's ids, as the StepRecord holds them."""
        return QueueIds(self.log, len(self.log) - len(self.queue), len(self.log))

    def _follow(self, waiting: list[Request]) -> Optional[int]:
        """When ``waiting`` is the queue seen last less some requests at its head, followed by
        new arrivals: how many left the head (the copy kept is made ``waiting``'s). None when
        it changed otherwise. The copy is moved and compared pointer by pointer (a Request
        compares by identity), in C: the requests themselves are not read."""
        queue = self.queue
        try:
            gone = queue.index(waiting[0]) if waiting else len(queue)
        except ValueError:
            gone = len(queue)  # a new head: the old queue left whole, or it changed otherwise
        if len(queue) - gone > len(waiting):
            return None
        del queue[:gone]
        queue += waiting[len(queue):]
        return gone if queue == waiting else None

    @staticmethod
    def _term(req: Request) -> int:
        return decisions.waiting_demand(req.num_tokens, req.num_computed_tokens)  # type: ignore[no-any-return]
