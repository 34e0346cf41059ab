"""``fuzz --seconds S`` is fuzzing time, counted from the session's first example; the
start-up before it (from ``started``, the command's start) is reported apart and capped."""
from __future__ import annotations

import time

import pytest

from tokenbudget.fuzz.session import fuzz
from tokenbudget.engine_path import STARTED_ENV, own_process_started
from tokenbudget.fuzz_cmd import command_started

POLICY = "vllm-adaptive"


def test_a_long_start_up_leaves_the_seconds_to_fuzzing() -> None:
    report = fuzz(POLICY, seconds=0.5, started=time.time() - 100.0, startup_seconds=1000.0)
    assert report.examples >= 1 and report.steps >= 1 and not report.startup_exceeded
    assert report.startup_seconds >= 100.0 > report.seconds


def test_a_start_up_past_its_cap_runs_no_example() -> None:
    report = fuzz(POLICY, seconds=0.5, started=time.time() - 100.0, startup_seconds=50.0)
    assert report.examples == 0 and report.steps == 0 and report.startup_exceeded
    assert report.seconds == 0.0 and report.startup_seconds >= 100.0
    assert report.to_json()["startup_exceeded"] is True


def test_a_command_starts_now_or_in_an_engine_path_child_when_its_process_did(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(STARTED_ENV, raising=False)
    before = time.time()
    assert before <= command_started() <= time.time()
    monkeypatch.setenv(STARTED_ENV, "1234.5")
    assert abs(command_started() - own_process_started()) < 1.0 and command_started() < before


def test_no_example_starts_past_the_end_whatever_the_seconds_left() -> None:
    report = fuzz(POLICY, seconds=1000.0, ends_by=time.time() - 1.0)
    assert report.examples == 0 and report.steps == 0
