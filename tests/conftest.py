"""Hypothesis profiles. Choose one with ``pytest --hypothesis-profile=NAME``.

- ``ci``: deterministic (derandomized, no example database), no deadline; what CI runs.
- ``dev``: the default; random, with the local example database, a few more examples.
- ``nightly``: many examples for long unattended runs.
- ``symbolic``: the same properties on the hypothesis-crosshair backend (SMT-driven
  inputs); it falls back to random generation where CrossHair cannot reason.
"""
from __future__ import annotations

import math

import pytest

from hypothesis import HealthCheck, settings
from hypothesis.database import DirectoryBasedExampleDatabase

from tokenbudget import console

settings.register_profile(
    "ci",
    derandomize=True,
    database=None,
    deadline=None,
    max_examples=100,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.register_profile(
    "dev",
    database=DirectoryBasedExampleDatabase(".hypothesis/examples"),
    deadline=None,
    max_examples=200,
)
settings.register_profile("nightly", deadline=None, max_examples=5000, suppress_health_check=[HealthCheck.too_slow])
settings.register_profile(
    "symbolic",
    backend="crosshair",
    deadline=None,
    max_examples=100,
    database=None,
    suppress_health_check=list(HealthCheck),
)
settings.load_profile("dev")


@pytest.fixture(autouse=True)
def no_timed_progress(monkeypatch: pytest.MonkeyPatch) -> None:
    """Commands print a progress line every few seconds when stderr is not a terminal; how
    many depends on the machine's speed, so the suite's commands print none
    (tests/unit/test_console.py checks the lines themselves)."""
    monkeypatch.setattr(console, "EVERY", math.inf)
