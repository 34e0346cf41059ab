"""``fuzz --seconds S`` counts from the command's start: each policy's budget ends at
started + (i + 1) * S, however long starting (imports, spawning workers) took."""
from __future__ import annotations

import time

from tokenbudget.fuzz.session import MIN_SECONDS, seconds_left
from tokenbudget.fuzz_cmd import process_started


def test_the_budget_left_counts_from_the_start() -> None:
    started = time.time() - 3.0
    assert 6.0 < seconds_left(started, 0, 10.0) <= 7.0
    assert 16.0 < seconds_left(started, 1, 10.0) <= 17.0


def test_a_start_past_the_budget_leaves_the_minimum() -> None:
    assert seconds_left(time.time() - 100.0, 0, 10.0) == MIN_SECONDS


def test_the_process_started_before_now() -> None:
    assert 0.0 <= time.time() - process_started() < 3600.0
