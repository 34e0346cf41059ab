"""A start-up that hangs in this process (``fuzz --workers 1`` importing an engine or a
policy module that never returns) stopped at its cap, as a worker's parent stops a worker's.

``startup_alarm`` arms SIGALRM in the main thread: past the cap, unless ``began()`` says the
first example has begun, ``StartupHung`` is raised wherever the process is (a sleep, an
import, Python code; not inside one call into C that never returns to Python).
"""
from __future__ import annotations

import signal
import threading
from contextlib import contextmanager
from typing import Callable, Iterator


class StartupHung(BaseException):
    """Start-up ran past its cap (a BaseException: no ``except Exception`` of a policy's
    loader or an engine's import turns it into another error)."""


@contextmanager
def startup_alarm(seconds: float, began: Callable[[], bool]) -> Iterator[None]:
    """Raise StartupHung in the block once ``seconds`` have passed, unless ``began()``; no
    alarm off the main thread or without SIGALRM (the block then runs unwatched)."""
    if threading.current_thread() is not threading.main_thread() or not hasattr(signal, "SIGALRM"):
        yield
        return

    def fire(signum: int, frame: object) -> None:
        if not began():
            raise StartupHung

    previous = signal.signal(signal.SIGALRM, fire)
    signal.setitimer(signal.ITIMER_REAL, max(seconds, 0.001))
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
