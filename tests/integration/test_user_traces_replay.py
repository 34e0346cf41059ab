"""A trace written for a user policy, by any command that writes one, names the policy by
its import path as the user gave it, so that ``tokenbudget replay FILE`` replays it as
written, with no ``--policy``. Each user policy below has a ``name`` of its own, which no
trace may carry instead."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

POLICIES = '''
    from tokenbudget.model import and_
    from tokenbudget.model.sglang.policies import SglangV1RetractFixed
    from tokenbudget.model.trtllm.policies import TrtllmOneModelUnreserved
    from tokenbudget.model.vllm.policies import VllmAdaptive


    class LooseExitRule(VllmAdaptive):
        """The exit rule ``input >= d`` for ``> d`` (the pass skeleton's searches find it)."""
        name = "my-loose-exit-rule"

        def may_schedule(self, p, b):
            return and_(b.token > 0, b.input >= p.draft_slots)


    class PageBoundary(SglangV1RetractFixed):
        """SGLang before #14180 (the bounded trace search over the model finds it)."""
        name = "my-page-boundary"

        def pages_next_decode(self, loop, reqs):
            if loop.page == 1:
                return len(reqs)
            return sum(1 for r in reqs if (r.num_tokens - 1) % loop.page == 0)


    class Unreserved(TrtllmOneModelUnreserved):
        """A copy of a built-in whose row overflow the fuzzer finds in seconds."""
        name = "my-unreserved"
'''
MODULE = "user_trace_policies"


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    folder = tmp_path_factory.mktemp("policies")
    (folder / f"{MODULE}.py").write_text(textwrap.dedent(POLICIES))
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(folder), os.environ.get("PYTHONPATH", "")])}


def tokenbudget(env: dict[str, str], *argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "tokenbudget.cli", *argv, "--quiet"], capture_output=True, text=True,
                          timeout=600, env=env)


def assert_replays_as_written(env: dict[str, str], files: list[Path], spec: str) -> None:
    assert files, f"no trace was written for {spec}"
    for path in files:
        assert json.loads(path.read_text())["policy"] == spec, path
        done = tokenbudget(env, "replay", str(path))
        assert done.returncode == 1 and "violated, as expected" in done.stdout, (path, done.stdout, done.stderr)


@pytest.mark.parametrize("cls, invariant", [
    ("LooseExitRule", "model-error"),  # a trace of the pass skeleton's search (tokenbudget/proofs/trace_family.py)
    ("PageBoundary", "kv-capacity"),  # a trace of the bounded search over the model (tokenbudget/proofs/loop_search.py)
])
def test_prove_emits_traces_that_replay_without_policy(env, tmp_path, cls, invariant):
    spec = f"{MODULE}:{cls}"
    done = tokenbudget(env, "prove", "--policy", spec, "--invariant", invariant, "--emit-traces", str(tmp_path))
    assert done.returncode in (0, 1), done.stderr
    assert_replays_as_written(env, sorted(tmp_path.glob("*.json")), spec)


def test_fuzz_writes_traces_that_replay_without_policy(env, tmp_path):
    spec = f"{MODULE}:Unreserved"
    done = tokenbudget(env, "fuzz", "--policy", spec, "--examples", "30", "--corpus", str(tmp_path))
    assert done.returncode == 1, done.stderr
    assert_replays_as_written(env, sorted(tmp_path.glob("*.json")), spec)
