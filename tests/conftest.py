"""Hypothesis profiles. Choose one with ``pytest --hypothesis-profile=NAME``.

- ``ci``: deterministic (derandomized, no example database), no deadline; what CI runs.
- ``dev``: the default; random, with the per-user example database (``fuzz.database``),
  a few more examples.
- ``nightly``: many examples for long unattended runs.
- ``symbolic``: the same properties on the hypothesis-crosshair backend (SMT-driven
  inputs); it falls back to random generation where CrossHair cannot reason.

The suite runs on pytest-xdist workers (``-n auto`` in pyproject.toml). Each test file
goes to one worker whole, so a module-scoped fixture runs once; the files of one
``SHARED_WORKER`` group share one worker, and so a session fixture (``builtin_proofs``,
``vllm_imported``).
"""
from __future__ import annotations

import gc
import math
import os
from collections import Counter
from typing import Any, Iterator

import pytest
from hypothesis import HealthCheck, settings
from hypothesis.configuration import set_hypothesis_home_dir
from hypothesis.database import DirectoryBasedExampleDatabase

from tokenbudget import console
from tokenbudget.fuzz.database import ENVIRONMENT, NONE, cache_folder
from tokenbudget.harness.vllm.async_runner import SYNC_ENV
from tokenbudget.model import builtin_policies
from tokenbudget.proofs.prove import default_jobs, prove
from tokenbudget.proofs.verdicts import Outcome

from proof_budgets import GENEROUS

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


SHARED_WORKER = {  # test file -> the group of files that run on one worker
    "tests/integration/test_cli.py": "builtin-proofs",
    "tests/integration/test_proofs_prove.py": "builtin-proofs",
    "tests/integration/test_sglang_prove.py": "builtin-proofs",
    "tests/vllm/test_vllm_conform.py": "vllm-in-process",  # one worker imports vLLM (~9 s)
    "tests/vllm/test_vllm_target.py": "vllm-in-process",
    "tests/integration/test_bad_input.py": "vllm-in-process",  # replays --target vllm
}


START_FIRST = (  # the scopes of tens of seconds each, longest first, so that none runs alone at the end
    "builtin-proofs", "tests/integration/test_proofs_crosshair.py", "tests/vllm/test_both_vllm_versions.py",
    "vllm-in-process", "tests/quality/test_planted_bugs.py", "tests/quality/test_real_bugs.py",
    "tests/integration/test_proofs_induction.py", "tests/integration/test_fuzz_campaign.py",
    "tests/sglang/test_sglang_conformance.py", "tests/fastdeploy/test_fastdeploy_conformance.py",
)

NO_FULL_PASS = 2**31 - 1  # the oldest generation's threshold: Python never makes a full pass by itself


def scope(nodeid: str) -> str:
    """The file of a test, or its ``SHARED_WORKER`` group."""
    path = nodeid.split("::", 1)[0]
    return SHARED_WORKER.get(path, path)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The ``START_FIRST`` scopes first, in that order, then those with most tests; a
    file's tests keep their order."""
    counts = Counter(scope(item.nodeid) for item in items)
    rank = {name: i for i, name in enumerate(START_FIRST)}
    items.sort(key=lambda item: (rank.get(scope(item.nodeid), len(rank)), -counts[scope(item.nodeid)]))


def pytest_collection_finish(session: pytest.Session) -> None:
    """Python's full collections run only between files (``pytest_runtest_teardown``):
    what collecting imported is frozen, and none runs by itself."""
    gc.freeze()
    young, middle, _ = gc.get_threshold()
    gc.set_threshold(young, middle, NO_FULL_PASS)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    """After each file, its module fixtures torn down: collect its garbage and freeze what
    survives (``gc.freeze``). A full pass walks every object not frozen, and a worker holds
    millions (torch and vLLM imported, the session fixtures): run by Python itself, full
    passes took 37-44 of the suite's ~640 CPU-s; run here, 21."""
    result = yield
    if nextitem is None or nextitem.path != item.path:
        gc.collect()
        gc.freeze()
    return result


def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """Whole files (or ``SHARED_WORKER`` groups) to one worker, in the order of the
    collection (``pytest_collection_modifyitems``). Decided on the controller from node ids
    alone: xdist's own ``--dist loadgroup`` marks node ids on the workers, which pytest 9
    ignores (every test was scheduled on its own). An explicit ``--dist`` other than
    ``load`` gets xdist's own scheduler."""
    if config.getvalue("dist") != "load":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class ByFile(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return scope(nodeid)

    config.option.loadscopereorder = False
    return ByFile(config, log)


@pytest.fixture(scope="session")
def builtin_proofs() -> list[Outcome]:
    """Every obligation of every built-in policy, proved once per worker session."""
    return prove(list(builtin_policies()), GENEROUS, jobs=default_jobs())


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


@pytest.fixture(autouse=True)
def no_timed_progress(monkeypatch: pytest.MonkeyPatch) -> None:
    """Commands print a progress line every few seconds when stderr is not a terminal; how
    many depends on the machine's speed, so the suite's commands print none
    (tests/unit/test_console.py checks the lines themselves)."""
    monkeypatch.setattr(console, "EVERY", math.inf)


@pytest.fixture(autouse=True)
def scheduler_choice_undone(monkeypatch: pytest.MonkeyPatch) -> None:
    """A command run in the test's process (``main([...])``) carries ``--async``/``--sync`` in
    the environment for its children, and conform and fuzz set ``--async`` by default: each
    test starts without it and leaves none behind."""
    monkeypatch.delenv(SYNC_ENV, raising=False)
