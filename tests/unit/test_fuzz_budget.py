"""``fuzz --seconds S`` is fuzzing time, counted from the session's first example; the
start-up before it (from ``started``, the command's start) is reported apart and capped."""
from __future__ import annotations

import time

from tokenbudget.fuzz.session import fuzz
from tokenbudget.fuzz_cmd import process_started

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


def test_the_process_started_before_now() -> None:
    assert 0.0 <= time.time() - process_started() < 3600.0
