"""Draws that depend on the seed alone, not on which modules the process has loaded.

Hypothesis (6.131 and later) sometimes draws a constant collected from every loaded module
outside site-packages (``providers._get_local_constants``). Which modules those are depends
on the process's history (the tests that ran before in one pytest worker, an editable install
against a wheel, a user's policy module), so the same seed drew different examples. Inside
``seeded_draws()`` that collection is empty; Hypothesis's global constants stay.
"""
from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from hypothesis.internal.conjecture import providers

_NO_LOCAL_CONSTANTS = providers.Constants() if hasattr(providers, "Constants") else None


@contextmanager
def seeded_draws() -> Iterator[None]:
    """Run Hypothesis with no constants from local modules (a no-op where it collects none)."""
    if _NO_LOCAL_CONSTANTS is None or not hasattr(providers, "_get_local_constants"):
        yield
        return
    collect = providers._get_local_constants
    providers._get_local_constants = lambda: _NO_LOCAL_CONSTANTS
    providers.CONSTANTS_CACHE.cache.clear()
    try:
        yield
    finally:
        providers._get_local_constants = collect
        providers.CONSTANTS_CACHE.cache.clear()
