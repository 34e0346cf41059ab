"""model.user_code: which BaseExceptions out of user code are its own failure, and the
bracket around a call (os._exit refused inside, given back after; the time limit)."""
from __future__ import annotations

import os
import signal
import time

import pytest

from tokenbudget.model import user_code
from tokenbudget.spec import interrupts


@pytest.mark.parametrize("e", [SystemExit(0), GeneratorExit(), user_code.ExitCalled(0), user_code.CallTimedOut(1)])
def test_exits_and_time_outs_are_the_codes_own(e: BaseException) -> None:
    assert user_code.escaped(e)


def test_other_base_exceptions_pass_through() -> None:
    class Elsewhere(BaseException):
        pass
    assert not user_code.escaped(Elsewhere())


def test_a_keyboard_interrupt_is_the_users_ctrl_c_only_when_one_came() -> None:
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)  # as from a shell, not a background job
    try:
        watched_or_not()
    finally:
        signal.signal(signal.SIGINT, previous)


def test_a_keyboard_interrupt_is_the_codes_own_where_sigint_is_ignored() -> None:
    """As in fuzz workers: no Ctrl-C can reach the process, so a KeyboardInterrupt is the code's."""
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        assert user_code.escaped(KeyboardInterrupt())
    finally:
        signal.signal(signal.SIGINT, previous)


def watched_or_not() -> None:
    assert not user_code.escaped(KeyboardInterrupt()), "no watch: a library caller's Ctrl-C is never taken"
    with interrupts.handled():
        assert user_code.escaped(KeyboardInterrupt()), "watched, and no Ctrl-C came: the code raised it"
        with pytest.raises(KeyboardInterrupt):
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(5)
        assert not user_code.escaped(KeyboardInterrupt()), "a real Ctrl-C came: it is the user's"


def test_os_exit_is_refused_inside_user_code_and_exits_outside(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(user_code.ExitCalled):
        with user_code.running():
            with user_code.running():  # nested: still refused after the inner call ends
                pass
            os._exit(0)
    exits: list[int] = []
    monkeypatch.setattr(user_code, "_real_exit", exits.append)
    os._exit(7)
    assert exits == [7]


def test_a_call_past_the_limit_is_interrupted_and_the_next_call_is_not() -> None:
    user_code.set_limit(0.2)
    try:
        start = time.monotonic()
        with pytest.raises(user_code.CallTimedOut):
            with user_code.running():
                while True:
                    pass
        assert time.monotonic() - start < 60
        with user_code.running():
            time.sleep(0.1)  # within the limit: nothing fires
    finally:
        user_code.set_limit(None)


@pytest.mark.parametrize("text, seconds", [(None, user_code.DEFAULT_LIMIT_S), ("2.5", 2.5), ("-1", 5.0), ("x", 5.0),
                                           ("inf", 5.0)])
def test_the_limit_comes_from_the_environment(monkeypatch: pytest.MonkeyPatch, text: str | None,
                                              seconds: float) -> None:
    if text is None:
        monkeypatch.delenv(user_code.LIMIT_ENV, raising=False)
    else:
        monkeypatch.setenv(user_code.LIMIT_ENV, text)
    assert user_code._from_environment() == seconds
