"""PreemptionRecorder: the order of a vLLM scheduler's preemptions, which its output keeps as a set."""
from __future__ import annotations

from typing import Any, Callable, Optional


class PreemptionRecorder:
    """Wraps the scheduler's ``_preempt_request`` (what it does is unchanged): between
    ``start`` and ``stop`` (one ``schedule()`` pass) the preempted ids are kept in order;
    every preemption, in a pass or not, is also reported to ``on_preempt(request_id, in_pass)``."""

    def __init__(self, sched: Any, on_preempt: Optional[Callable[[str, bool], None]] = None) -> None:
        self.in_pass = False
        self._ids: list[str] = []
        original = sched._preempt_request

        def recording_preempt(request: Any, *args: Any, **kwargs: Any) -> Any:
            if self.in_pass:
                self._ids.append(request.request_id)
            result = original(request, *args, **kwargs)
            if on_preempt is not None:
                on_preempt(request.request_id, self.in_pass)
            return result

        sched._preempt_request = recording_preempt

    def start(self) -> None:
        """A pass begins: its preemptions are recorded afresh."""
        self.in_pass, self._ids = True, []

    def stop(self) -> tuple[str, ...]:
        """The pass ended (returned or raised): the ids it preempted, in order."""
        self.in_pass = False
        return tuple(self._ids)
