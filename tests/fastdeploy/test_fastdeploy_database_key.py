"""The example database keys a real engine's saved failures by its release and folder
(``EngineDescriptor.identity``): two FastDeploy commits never replay each other's."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Callable

from tokenbudget.fuzz.machine import database_key

IDENTITY = "import sys; from pathlib import Path; from tokenbudget.harness import registry; " \
           "print(registry.engine('fastdeploy').identity(Path(sys.argv[1])))"


def identity(folder: Path) -> str:
    """The identity in a process of its own: one process loads one FastDeploy."""
    done = subprocess.run([sys.executable, "-c", IDENTITY, str(folder)], capture_output=True, text=True,
                          timeout=300, check=True)
    return done.stdout.strip().splitlines()[-1]


def test_two_fastdeploy_commits_have_two_identities_and_two_keys(fastdeploy_at: Callable[[str], Path]) -> None:
    older, newer = (identity(fastdeploy_at(commit)) for commit in ("2a606e361", "564c78d78"))
    assert older.startswith("fastdeploy ") and "2a606e361" in older and "564c78d78" in newer
    keys = {database_key("fastdeploy-v0", "fastdeploy", "configs", engine=who) for who in (older, newer)}
    assert len(keys) == 2
