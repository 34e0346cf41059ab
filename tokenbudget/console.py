"""Where a command's output goes: its result on stdout, progress on stderr.

The result is plain text or exactly one JSON document. On a terminal, progress is one
line rewritten in place and cleared before the result is printed. Elsewhere (a log, a
pipe) a long run prints its progress as a plain line every ``EVERY`` seconds, the first
after ``EVERY`` seconds, so a short run prints none. ``quiet`` turns progress off.
With ``--json`` the document is the only thing on stdout (``json_only``): whatever else
writes there, a user policy's ``print`` in this process or in a worker, goes to stderr.
"""
from __future__ import annotations

import json
import os
import sys
import time
from contextlib import contextmanager
from typing import Any, Iterator, TextIO

from .render import clean

EVERY = 5.0  # seconds between progress lines when stderr is not a terminal


class Console:
    def __init__(self, quiet: bool = False) -> None:
        self.live = sys.stderr.isatty()
        self.quiet = quiet
        self.showing = False
        self.last = time.monotonic()
        self.out: TextIO | None = None  # where the result goes; None: sys.stdout as it is then

    def text(self, text: str) -> None:
        self.clear()
        print(text, file=self.out or sys.stdout)

    def json(self, doc: Any) -> None:
        self.clear()
        print(json.dumps(doc, indent=2), file=self.out or sys.stdout)

    @contextmanager
    def json_only(self) -> Iterator[None]:
        """While it lasts, the result goes to the real stdout and anything else written there
        goes to stderr: file descriptor 1 itself when stdout is one (so child processes
        inherit it), else (a caller that captured sys.stdout) sys.stdout."""
        real = sys.stdout
        try:
            fd = real.fileno()
        except (AttributeError, OSError, ValueError):
            fd = None
        if fd is None:
            self.out, sys.stdout = real, sys.stderr
            try:
                yield
            finally:
                sys.stdout, self.out = real, None
            return
        real.flush()
        saved = os.dup(fd)
        self.out = os.fdopen(os.dup(fd), "w")
        os.dup2(sys.stderr.fileno(), fd)
        try:
            yield
        finally:
            real.flush()
            self.out.close()
            self.out = None
            os.dup2(saved, fd)
            os.close(saved)

    def progress(self, message: str) -> None:
        if self.quiet:
            return
        message = clean(message, 200)  # it may quote the input: a path, an id
        if self.live:
            sys.stderr.write(f"\r\033[K{message[:100]}")
            sys.stderr.flush()
            self.showing = True
            return
        now = time.monotonic()
        if now - self.last >= EVERY:
            self.last = now
            sys.stderr.write(f"tokenbudget: {message}\n")
            sys.stderr.flush()

    def note(self, message: str) -> None:
        """One line on stderr, ``tokenbudget: ...``, unless --quiet."""
        if self.quiet:
            return
        self.clear()
        sys.stderr.write(f"tokenbudget: {clean(message, 300)}\n")
        sys.stderr.flush()

    def warn(self, message: str) -> None:
        """One line on stderr, ``tokenbudget: warning: ...``, even with --quiet."""
        self.clear()
        sys.stderr.write(f"tokenbudget: warning: {clean(message, 300)}\n")
        sys.stderr.flush()

    def clear(self) -> None:
        if self.showing:
            sys.stderr.write("\r\033[K")
            sys.stderr.flush()
            self.showing = False
