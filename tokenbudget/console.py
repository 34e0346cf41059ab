"""Where a command's output goes: its result on stdout, progress on stderr.

The result is plain text or exactly one JSON document. Progress is one line rewritten in
place, shown only when stderr is a terminal, and cleared before the result is printed.
"""
from __future__ import annotations

import json
import sys
from typing import Any


class Console:
    def __init__(self) -> None:
        self.live = sys.stderr.isatty()
        self.showing = False

    def text(self, text: str) -> None:
        self.clear()
        print(text)

    def json(self, doc: Any) -> None:
        self.clear()
        print(json.dumps(doc, indent=2))

    def progress(self, message: str) -> None:
        if self.live:
            sys.stderr.write(f"\r\033[K{message[:100]}")
            sys.stderr.flush()
            self.showing = True

    def clear(self) -> None:
        if self.showing:
            sys.stderr.write("\r\033[K")
            sys.stderr.flush()
            self.showing = False
