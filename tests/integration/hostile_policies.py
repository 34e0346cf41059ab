"""User policies that attack the process that runs them: they exit it, stop it, hold it or
kill it. ``test_hostile_policies`` loads them with ``--policy hostile_policies:NAME``;
each one's docstring says what it does at its first grant."""
from __future__ import annotations

import os
import signal
import time

from tokenbudget.model import VllmLoop
from tokenbudget.model.vllm.policies import VllmAdaptive


class ExitsZero(VllmAdaptive):
    """sys.exit(0): the run would end with a pass."""

    def grant(self, p, demand, b):  # type: ignore[no-untyped-def]
        raise SystemExit(0)


class ExitsThree(VllmAdaptive):
    """sys.exit(3): the run would end with an exit status no command gives."""

    def grant(self, p, demand, b):  # type: ignore[no-untyped-def]
        raise SystemExit(3)


class HardExit(VllmAdaptive):
    """os._exit(0): the process would end at once, with status 0."""

    def grant(self, p, demand, b):  # type: ignore[no-untyped-def]
        os._exit(0)


class RaisesKeyboardInterrupt(VllmAdaptive):
    """KeyboardInterrupt, with no Ctrl-C typed: the run would end as interrupted (130)."""

    def grant(self, p, demand, b):  # type: ignore[no-untyped-def]
        raise KeyboardInterrupt


class Spins(VllmAdaptive):
    """An endless loop."""

    def grant(self, p, demand, b):  # type: ignore[no-untyped-def]
        while True:
            pass


class Sleeps(VllmAdaptive):
    """An hour's sleep in one call."""

    def grant(self, p, demand, b):  # type: ignore[no-untyped-def]
        time.sleep(3600)
        return super().grant(p, demand, b)


class SwallowsTheTimeout(VllmAdaptive):
    """An endless loop that catches everything raised into it, once."""

    def grant(self, p, demand, b):  # type: ignore[no-untyped-def]
        try:
            while True:
                pass
        except BaseException:
            pass
        while True:
            pass


class GrantsTrue(VllmAdaptive):
    """Grants True where a number of tokens is due."""

    def grant(self, p, demand, b):  # type: ignore[no-untyped-def]
        return True


class KillsItsProcess(VllmAdaptive):
    """SIGKILL to its own process: nothing in it can report."""

    def grant(self, p, demand, b):  # type: ignore[no-untyped-def]
        os.kill(os.getpid(), signal.SIGKILL)


class SpinningLoop(VllmLoop):
    """A loop variant whose running grant never returns."""

    @classmethod
    def running_grant(cls, policy, p, budgets, demand, computed, threshold, max_model_len, bypass):  # type: ignore
        while True:
            pass


class LoopSpins(VllmAdaptive):
    """Runs on SpinningLoop."""

    loop = SpinningLoop


class ExitingLoop(VllmLoop):
    """A loop variant whose running grant calls sys.exit(0)."""

    @classmethod
    def running_grant(cls, policy, p, budgets, demand, computed, threshold, max_model_len, bypass):  # type: ignore
        raise SystemExit(0)


class LoopExits(VllmAdaptive):
    """Runs on ExitingLoop."""

    loop = ExitingLoop
