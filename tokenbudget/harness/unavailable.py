"""EngineUnavailable: a real engine cannot run here (not installed, not the one asked for,
or one whose internals the harness reads have moved). One line naming what is missing and
the fix; every engine package raises it or a subclass, and the command layer maps it to
bad input (``spec.target.TargetUnavailable``)."""
from __future__ import annotations

from ..spec.target import TargetUnavailable


class EngineUnavailable(TargetUnavailable):
    """A real engine cannot be imported or driven here; the message says why and the fix, in one line."""
