"""Progress off a terminal: a plain line every EVERY seconds of a long run, none with quiet."""
from __future__ import annotations

import pytest

from tokenbudget import console
from tokenbudget.console import Console


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.mark.parametrize("quiet, lines", [(False, 2), (True, 0)])
def test_a_long_run_off_a_terminal_prints_a_line_every_few_seconds(monkeypatch: pytest.MonkeyPatch,
                                                                   capsys: pytest.CaptureFixture[str],
                                                                   quiet: bool, lines: int) -> None:
    clock = Clock()
    monkeypatch.setattr(console.time, "monotonic", clock)
    monkeypatch.setattr(console, "EVERY", 5.0)
    out = Console(quiet=quiet)
    assert not out.live  # capsys: stderr is not a terminal
    for step in range(12):  # one call a second for 12 seconds: lines at 5 s and 10 s
        out.progress(f"step {step}")
        clock.now += 1.0
    err = capsys.readouterr().err
    assert err.count("\n") == lines
    if lines:
        assert err.splitlines() == ["tokenbudget: step 5", "tokenbudget: step 10"]


def test_progress_escapes_a_lone_surrogate(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    clock = Clock()
    monkeypatch.setattr(console.time, "monotonic", clock)
    monkeypatch.setattr(console, "EVERY", 5.0)
    out = Console()
    clock.now += 6
    out.progress("id \ud800")
    assert capsys.readouterr().err == "tokenbudget: id \\ud800\n"
