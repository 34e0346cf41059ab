"""Ctrl-C, noted at once and never lost.

The command line turns Ctrl-C handling on (``handled``). A SIGINT then raises
KeyboardInterrupt, as Python's own handler does, and is also noted at once by a watchdog
thread (through ``signal.set_wakeup_fd``), which runs the cancels registered with
``on_interrupt``: C code that holds the main thread, z3 solving, is stopped there and then,
not when it returns. Python can lose the exception itself: raised inside a destructor it is
only printed, inside a ctypes call's argument conversion (z3's bindings) it becomes a
``ctypes.ArgumentError``, and a loop that catches Exception may take that for a fault of its
own. Long loops call ``check`` to raise it again, and a command that fails while one is
noted was interrupted. Outside ``handled`` (a library caller) nothing is ever noted.
"""
from __future__ import annotations

import os
import signal
import sys
import threading
from contextlib import contextmanager
from typing import Any, Callable, Iterator

_noted = False
_watching = False
_cancels: list[Callable[[], None]] = []


def requested() -> bool:
    """Whether Ctrl-C came while ``handled`` was on."""
    return _noted


def watching() -> bool:
    """Whether ``handled`` is on: a Ctrl-C would be noted (so a KeyboardInterrupt raised while
    none was noted is not the user's)."""
    return _watching


def check() -> None:
    """Raise KeyboardInterrupt again when Ctrl-C came (it may have been lost on the way)."""
    if _noted:
        raise KeyboardInterrupt


def on_interrupt(cancel: Callable[[], None]) -> None:
    """Run ``cancel`` (from another thread, so thread-safe) the moment Ctrl-C comes."""
    if cancel not in _cancels:
        _cancels.append(cancel)


def _on_sigint(signum: int, frame: Any) -> None:
    global _noted
    _noted = True
    raise KeyboardInterrupt


def _watch(fd: int) -> None:
    """Read the signal numbers the C-level handler writes to ``fd`` until it is closed."""
    global _noted
    while True:
        try:
            signals = os.read(fd, 64)
        except OSError:
            return
        if not signals:
            return
        if signal.SIGINT in signals:
            _noted = True
            for cancel in list(_cancels):
                cancel()


def _quiet_about_lost_interrupts(previous: Any) -> Any:
    """An unraisable hook that drops a KeyboardInterrupt lost in a destructor (it is noted
    and raised again at the next ``check``), and once Ctrl-C came every error of a
    destructor (an object half-built when it came fails in its ``__del__``, z3's among
    them); it passes anything else to ``previous``."""
    def hook(unraisable: Any) -> None:
        if not _noted and not issubclass(unraisable.exc_type, KeyboardInterrupt):
            previous(unraisable)
    return hook


def _dropped(unraisable: Any) -> None:
    """The unraisable hook once ``handled`` ended on a Ctrl-C: destructors' errors are dropped."""


@contextmanager
def handled() -> Iterator[None]:
    """Note every Ctrl-C while it lasts (in the main thread; elsewhere it changes nothing). A
    SIGINT that is ignored (a background job of a script) stays ignored."""
    global _noted, _watching
    if (threading.current_thread() is not threading.main_thread()
            or signal.getsignal(signal.SIGINT) is not signal.default_int_handler):
        yield
        return
    _noted = False
    read, write = os.pipe()
    os.set_blocking(write, False)
    previous_fd = signal.set_wakeup_fd(write, warn_on_full_buffer=False)
    watchdog = threading.Thread(target=_watch, args=(read,), name="tokenbudget-interrupts", daemon=True)
    watchdog.start()
    previous_hook = sys.unraisablehook
    sys.unraisablehook = _quiet_about_lost_interrupts(previous_hook)
    signal.signal(signal.SIGINT, _on_sigint)
    _watching = True
    try:
        yield
    finally:
        _watching = False
        signal.signal(signal.SIGINT, signal.default_int_handler)
        # once Ctrl-C came the process is ending on it: the objects half-built then die quietly
        sys.unraisablehook = previous_hook if not _noted else _dropped
        signal.set_wakeup_fd(previous_fd)
        os.close(write)  # the watchdog reads the end of the pipe and returns
        watchdog.join()
        os.close(read)
        _noted = False
