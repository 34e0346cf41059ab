"""Hypothesis profiles. Choose one with ``pytest --hypothesis-profile=NAME``.

- ``ci``: deterministic (derandomized, no example database), no deadline; what CI runs.
- ``dev``: the default; random, with the per-user example database (``fuzz.database``),
  a few more examples.
- ``nightly``: many examples for long unattended runs.
- ``symbolic``: the same properties on the hypothesis-crosshair backend (SMT-driven
  inputs); it falls back to random generation where CrossHair cannot reason.
"""
from __future__ import annotations

import os
from typing import Iterator

import pytest
from hypothesis import HealthCheck, settings
from hypothesis.configuration import set_hypothesis_home_dir
from hypothesis.database import DirectoryBasedExampleDatabase

from tokenbudget.fuzz.database import ENVIRONMENT, NONE, cache_folder

if "HYPOTHESIS_STORAGE_DIRECTORY" not in os.environ:  # what Hypothesis keeps: not in the current directory
    set_hypothesis_home_dir(cache_folder() / "hypothesis")

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
    database=DirectoryBasedExampleDatabase(cache_folder() / "examples"),
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


@pytest.fixture(autouse=True, scope="session")
def command_database(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """The example database the commands run by a test default to (``--database``): none
    under a profile without one (``ci``: runs stay deterministic), else a folder of this
    session's; never the user's own."""
    before = os.environ.get(ENVIRONMENT)
    where = NONE if settings.default.database is None else str(tmp_path_factory.mktemp("examples"))
    os.environ[ENVIRONMENT] = where
    yield
    if before is None:
        del os.environ[ENVIRONMENT]
    else:
        os.environ[ENVIRONMENT] = before
