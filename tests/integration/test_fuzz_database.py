"""A shared example database: what one process found, another replays first (``Phase.reuse``).

Each fuzzing process here is a fresh interpreter, so the example key must not depend on
anything but the policy, the target, the config strategy and a real engine's release and
folder (``machine.database_key``).
The searching process does not shrink (it is the slow part); the replaying process runs
only the reuse phase, so whatever it reports came from the database, not from search.
"""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import Phase
from hypothesis.database import InMemoryExampleDatabase

from redis_server import WHY_NONE, redis_server
from tokenbudget.fuzz.machine import database_key, machine_class
from tokenbudget.fuzz.session import run_machine
from tokenbudget.model import get_policy

POLICY = "fastdeploy-v0"
SESSION = """
import json, sys
from hypothesis import Phase
from tokenbudget.fuzz.database import open_database
from tokenbudget.fuzz.session import fuzz
where, phases, examples = sys.argv[1], sys.argv[2], int(sys.argv[3])
report = fuzz(%r, examples=examples, seed=0, database=open_database(where),
              phases={"search": (Phase.generate, Phase.target), "replay": (Phase.reuse,)}[phases])
print(json.dumps({"examples": report.examples, "found": {c.kind: c.example for c in report.counterexamples}}))
""" % POLICY


def session(where: str, phases: str, examples: int) -> dict[str, object]:
    done = subprocess.run([sys.executable, "-c", SESSION, where, phases, str(examples)], capture_output=True,
                          text=True, timeout=600, check=True)
    return dict(json.loads(done.stdout))


def share(where: str) -> None:
    searched = session(where, "search", 40)
    found = searched["found"]
    assert isinstance(found, dict) and "input-rows-cap" in found and found["input-rows-cap"] > 1, searched
    replayed = session(where, "replay", 10)
    assert replayed["found"] == {kind: 1 for kind in found}, (searched, replayed)


def test_a_second_process_replays_what_the_first_saved_in_a_folder(tmp_path: Path) -> None:
    share(str(tmp_path / "examples"))


def test_a_second_process_replays_what_the_first_saved_in_redis() -> None:
    with redis_server() as url:
        if url is None:
            pytest.skip(WHY_NONE)
        share(url)


def test_nothing_is_replayed_from_an_empty_database(tmp_path: Path) -> None:
    assert session(str(tmp_path / "examples"), "replay", 10)["found"] == {}


def test_the_key_tells_policy_target_and_config_strategy_apart() -> None:
    keys = {database_key(POLICY, "model", "configs"), database_key(POLICY, "vllm", "configs"),
            database_key("vllm-static", "model", "configs"), database_key(POLICY, "model", "small")}
    assert len(keys) == 4 and database_key(POLICY, "model", "configs") in keys


def test_the_key_tells_two_releases_or_folders_of_one_engine_apart() -> None:
    keys = {database_key(POLICY, "fastdeploy", "configs", engine=f"fastdeploy {commit} /engines/{folder}")
            for commit in ("2a606e361", "564c78d78") for folder in ("a", "b")}
    assert len(keys) == 4 and database_key(POLICY, "fastdeploy", "configs") not in keys


@pytest.mark.parametrize("apart", ["target", "engine"])
def test_machines_of_two_targets_or_engines_keep_their_examples_apart(apart: str) -> None:
    policy = get_policy(POLICY)
    database = InMemoryExampleDatabase()
    for name in ("model", "another-model"):
        made = (machine_class(POLICY, policy, target_name=name) if apart == "target"
                else machine_class(POLICY, policy, engine=f"engine at /engines/{name}"))
        found = run_machine(made, 300, 0, (Phase.generate, Phase.target), database=database)
        assert found is not None and found.kind == "input-rows-cap"
    keys = {key for key, values in database.data.items() if values and not key.endswith((b".secondary", b".pareto"))}
    assert len(keys) == 2
