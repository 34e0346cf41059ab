"""What user code may not do to the process that runs it: exit it, stop it, or hold it."""
from __future__ import annotations

import os
import signal
import threading
import time
from contextlib import contextmanager
from threading import get_ident
from typing import Iterator

from ..spec import interrupts

DEFAULT_LIMIT_S = 5.0
IMPORT_LIMIT_S = 120.0  # importing a policy's module may import an engine (vLLM: seconds on a busy machine)
LIMIT_ENV = "TOKENBUDGET_POLICY_TIMEOUT"
SIGNAL = signal.SIGUSR2


class ExitCalled(BaseException):
    """User code called ``os._exit(status)``."""

    def __init__(self, status: object) -> None:
        super().__init__(f"os._exit({status!r})")


class CallTimedOut(BaseException):
    """User code ran past the limit; ``seconds`` is the limit it ran past."""

    def __init__(self, seconds: float) -> None:
        super().__init__(f"did not return within {seconds:g} s")
        self.seconds = seconds


def _from_environment() -> float:
    text = os.environ.get(LIMIT_ENV)
    try:
        value = float(text) if text else DEFAULT_LIMIT_S
    except ValueError:
        return DEFAULT_LIMIT_S
    return value if value > 0 and value != float("inf") else DEFAULT_LIMIT_S


_limit = _from_environment()  # read once per process: a call's bracket is on the hot path


def limit() -> float:
    """The seconds a call into user code may run: ``set_limit``'s, else ``TOKENBUDGET_POLICY_TIMEOUT``'s
    when this process started, else the default."""
    return _limit


def set_limit(seconds: float | None) -> None:
    """The limit for this process and (through the environment) the processes it starts;
    None: back to the environment's, else the default."""
    global _limit
    if seconds is None:
        os.environ.pop(LIMIT_ENV, None)
    else:
        os.environ[LIMIT_ENV] = repr(seconds)
    _limit = _from_environment()


def escaped(e: BaseException) -> bool:
    """Whether ``e``, raised out of user code, is that code's own failure (see the module)."""
    if isinstance(e, KeyboardInterrupt):
        return not interrupts.requested() and (interrupts.watching() or signal.getsignal(signal.SIGINT) is
                                               signal.SIG_IGN)
    return isinstance(e, (SystemExit, GeneratorExit, ExitCalled, CallTimedOut))


def describe(e: BaseException) -> str:
    """What user code did when it left by a BaseException ``escaped`` accepts, for one line."""
    if isinstance(e, CallTimedOut):
        return str(e)
    if isinstance(e, SystemExit):
        return f"called sys.exit({e.code!r})"
    if isinstance(e, ExitCalled):
        return f"called {e}"
    return f"raised {type(e).__name__}"


class _Watch:
    """The process's one watchdog over the call in flight: ``depth`` of nested user calls,
    ``calls`` counts outermost ones, so the watchdog tells a new call from the same."""

    def __init__(self) -> None:
        self.depth = 0
        self.calls = 0
        self.timed = False  # the call in flight runs on the main thread, where the signal reaches it
        self.armed_for = -1  # the call the handler may interrupt (the one the watchdog fired on)
        self.seconds = DEFAULT_LIMIT_S
        self.thread: threading.Thread | None = None
        self.installed = False
        self.main_ident = -1

    def start(self) -> bool:
        """Start the watchdog and install the handler, once per process; False off the main thread."""
        if threading.current_thread() is not threading.main_thread():
            return False
        self.main_ident = threading.get_ident()
        if not self.installed:
            signal.signal(SIGNAL, _on_signal)
            os._exit = _exit_outside_user_code
            self.installed = True
        if self.thread is None:
            self.thread = threading.Thread(target=self._run, name="tokenbudget-user-code", daemon=True)
            self.thread.start()
        return True

    def _run(self) -> None:
        main = threading.main_thread()
        seen, since = -1, 0.0
        while main.is_alive():
            time.sleep(min(max(self.seconds / 4, 0.02), 0.5))
            call = self.calls if self.depth and self.timed else -1
            now = time.monotonic()
            if call != seen:
                seen, since = call, now
            elif call >= 0 and now - since >= self.seconds:
                self.armed_for, since = call, now
                signal.pthread_kill(main.ident, SIGNAL)


_watch = _Watch()
os.register_at_fork(after_in_child=lambda: setattr(_watch, "thread", None))  # threads do not survive a fork
_real_exit = os._exit


def _on_signal(signum: int, frame: object) -> None:
    if _watch.depth and _watch.armed_for == _watch.calls:
        raise CallTimedOut(_watch.seconds)


def _exit_outside_user_code(status: int) -> None:
    """``os._exit`` once user code ran here: refused inside it, the real one elsewhere."""
    if _watch.depth:
        raise ExitCalled(status)
    _real_exit(status)


def enter(seconds: float | None = None) -> bool:
    """Start a call into user code, timed at ``seconds`` (default ``limit()``); True for the
    outermost, which ``leave`` must be given."""
    watch = _watch
    if watch.depth:
        watch.depth += 1
        return False
    watch.timed = (watch.thread is not None and get_ident() == watch.main_ident) or watch.start()
    watch.seconds = seconds or _limit
    watch.calls += 1
    watch.depth = 1
    return True


def leave(outermost: bool) -> None:
    """End the call ``enter`` started (in a ``finally``)."""
    watch = _watch
    watch.depth -= 1
    if outermost:
        watch.armed_for = -1


@contextmanager
def running(seconds: float | None = None) -> Iterator[None]:
    """``enter`` and ``leave`` around a block of user code."""
    outermost = enter(seconds)
    try:
        yield
    finally:
        leave(outermost)
