"""FastDeploy's real ``ResourceManagerV1.schedule()`` in lockstep with the model at each modelled
commit: every workload agrees; F5 replays on the real code at 2a606e361 with its ``progress``
violation; the commands' one error line and exit 2 without FastDeploy or Paddle."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Callable

import pytest

from tokenbudget.harness.fastdeploy.runtime import CHILD_ENV, PATH_ENV
from tokenbudget.model.fastdeploy.commits import FASTDEPLOY_COMMITS

ROOT = Path(__file__).resolve().parents[2]
CROSSED = """
import json, sys
from dataclasses import replace
from pathlib import Path
from tokenbudget.harness.conform import run_conformance
from tokenbudget.harness.fastdeploy.conform import fastdeploy_engine
from tokenbudget.harness.fastdeploy.workloads import workload
folder, other, corpus = Path(sys.argv[1]), sys.argv[2], Path(sys.argv[3])
engine = fastdeploy_engine(folder)
crossed = replace(engine, workload=lambda seed, index: workload(seed, index, other))
print(json.dumps(run_conformance(0, 20, corpus, engine=crossed).to_json()))
"""
F5 = ROOT / "tokenbudget" / "corpus" / "findings" / "f5-fastdeploy-spec-method-full-batch-deadlock.json"
F7 = ROOT / "tokenbudget" / "corpus" / "findings" / "f7-fastdeploy-564c78d78-lone-chunk-own-reserve.json"
WORKLOADS = 30


def _tokenbudget(*argv: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", "import sys; from tokenbudget.cli import main; sys.exit(main())",
                           *argv], capture_output=True, text=True, timeout=900,
                          env={k: v for k, v in {**os.environ, **(env or {})}.items() if k != CHILD_ENV})


def _json(done: subprocess.CompletedProcess[str]) -> dict[str, object]:
    return json.loads(done.stdout)  # type: ignore[no-any-return]  # one document on stdout, nothing else


@pytest.mark.fastdeploy
@pytest.mark.parametrize("commit", list(FASTDEPLOY_COMMITS))
def test_every_workload_agrees_at_each_commit(commit: str, tmp_path: Path,
                                              fastdeploy_at: Callable[[str], Path]) -> None:
    folder = fastdeploy_at(commit)
    done = _tokenbudget("conform", "--engine", "fastdeploy", "--engine-path", str(folder), "--workloads",
                        str(WORKLOADS), "--json", "--quiet", "--corpus", str(tmp_path))
    doc = _json(done)
    assert done.returncode == 0, done.stderr[-2000:]
    assert doc["engine"] == "fastdeploy" and doc["release"] == commit and doc["warning"] is None
    assert doc["policy"] == FASTDEPLOY_COMMITS[commit].policy and str(doc["model_version"]).startswith(commit)
    assert doc["agreeing"] == WORKLOADS and doc["ok"] and doc["steps_agreeing"] > WORKLOADS


@pytest.mark.fastdeploy
def test_the_model_of_another_commit_diverges(tmp_path: Path, fastdeploy_at: Callable[[str], Path]) -> None:
    """#7498's reserve and victims at 564c78d78 against the model of 2a606e361: the workloads tell them apart."""
    folder = fastdeploy_at("564c78d78")
    done = subprocess.run([sys.executable, "-c", CROSSED, str(folder), "2a606e361", str(tmp_path)], capture_output=True,
                          text=True, timeout=900, env={**os.environ, CHILD_ENV: str(folder), PATH_ENV: str(folder)})
    assert done.returncode == 0, done.stderr[-2000:]
    doc = json.loads(done.stdout)
    assert not doc["ok"] and doc["agreeing"] < 20 and doc["unexplained"] == len(doc["divergences"]) >= 1


@pytest.mark.fastdeploy
def test_f7_stalls_the_real_scheduler_at_564c78d78(fastdeploy_at: Callable[[str], Path]) -> None:
    folder = fastdeploy_at("564c78d78")
    done = _tokenbudget("replay", "--target", "fastdeploy", str(F7), "--json", "--quiet", env={PATH_ENV: str(folder)})
    assert done.returncode == 1, done.stderr[-2000:]
    (trace,) = _json(done)["traces"]  # type: ignore[misc]
    assert {v["invariant"] for v in trace["violations"]} == {"progress"}
    assert trace["expectations"] and all(e["met"] for e in trace["expectations"]) and not trace["errors"]


@pytest.mark.fastdeploy
def test_f5_deadlocks_the_real_scheduler_at_the_7623_merge(fastdeploy_at: Callable[[str], Path]) -> None:
    folder = fastdeploy_at("2a606e361")
    done = _tokenbudget("replay", "--target", "fastdeploy", str(F5), "--json", "--quiet", env={PATH_ENV: str(folder)})
    assert done.returncode == 1, done.stderr[-2000:]  # a counterexample fails, as it should
    (trace,) = _json(done)["traces"]  # type: ignore[misc]
    assert {v["invariant"] for v in trace["violations"]} == {"progress"}
    assert trace["expectations"] and all(e["met"] for e in trace["expectations"])
    assert not trace["errors"]


@pytest.mark.fastdeploy
def test_a_missing_fastdeploy_or_paddle_is_one_line_and_exit_2(tmp_path: Path,
                                                               fastdeploy_at: Callable[[str], Path]) -> None:
    missing = _tokenbudget("conform", "--engine", "fastdeploy", "--engine-path", str(tmp_path))
    assert missing.returncode == 2 and missing.stderr.count("\n") == 1
    assert "holds no FastDeploy scheduler" in missing.stderr and not missing.stdout
    unset = _tokenbudget("replay", "--target", "fastdeploy", str(F5), env={PATH_ENV: ""})
    assert unset.returncode == 2 and "TOKENBUDGET_FASTDEPLOY_PATH" in unset.stderr and unset.stderr.count("\n") == 1
    folder = fastdeploy_at("2a606e361")
    no_paddle = tmp_path / "no-paddle" / "paddle"
    no_paddle.mkdir(parents=True)
    (no_paddle / "__init__.py").write_text("raise ImportError('no Paddle here')\n")
    path = os.pathsep.join([str(no_paddle.parent), os.environ.get("PYTHONPATH", "")])
    broken = _tokenbudget("conform", "--engine", "fastdeploy", "--engine-path", str(folder), env={"PYTHONPATH": path})
    assert broken.returncode == 2 and broken.stderr.count("\n") == 1, broken.stderr[-2000:]
    assert "cannot import Paddle" in broken.stderr and "paddlepaddle==3.3.1" in broken.stderr
