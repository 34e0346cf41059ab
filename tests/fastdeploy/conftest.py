"""FastDeploy's scheduler at the modelled commits: ``.engines/fastdeploy-<commit>`` (the archives of
``../shared/engines/`` unpacked, as ``.ci/run`` does) or the folder ``$TOKENBUDGET_FASTDEPLOY_PATH``
names, with Paddle's CPU wheel (the ``fastdeploy`` extra). The tests run FastDeploy in child
processes, never in the test process (its stubs stay where FastDeploy is loaded)."""
from __future__ import annotations

import importlib.util
import os
from pathlib import Path
from typing import Callable

import pytest

from tokenbudget.harness.fastdeploy.runtime import FastDeployUnavailable, INSTALL, PATH_ENV, check_folder

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session")
def fastdeploy_at() -> Callable[[str], Path]:
    """``fastdeploy_folder``, for the tests."""
    return fastdeploy_folder


def fastdeploy_folder(commit: str) -> Path:
    """The folder of FastDeploy at ``commit``; skips the test, saying why, when it or Paddle is missing."""
    if importlib.util.find_spec("paddle") is None:
        pytest.skip(f"Paddle is not installed; install it with: {INSTALL}")
    candidates = [ROOT / ".engines" / f"fastdeploy-{commit}"]
    if os.environ.get(PATH_ENV):
        candidates.insert(0, Path(os.environ[PATH_ENV]))
    for folder in candidates:
        try:
            found = check_folder(folder)
        except FastDeployUnavailable:
            continue
        if found.name.endswith(commit) or (found / ".git").exists():
            return found
    pytest.skip(f"FastDeploy {commit} is not unpacked at {candidates[-1]} (tar xzf "
                f"../shared/engines/fastdeploy-{commit}.tar.gz -C .engines, as .ci/run does)")
