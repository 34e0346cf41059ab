"""vLLM's own scheduler tests (``tests/`` of the release's sdist), run under the plugin in
strict mode against the matching vLLM: every test keeps the outcome it has without the
plugin, no violation is reported, and steps are judged.

The sdists' tests are fetched by ``.ci/vllm_own_tests.py`` into the folder named by
``TOKENBUDGET_VLLM_OWN_TESTS`` (``vllm-0.32.0/tests``, ``vllm-0.33.0/tests``, ``vllm-0.34.0/tests``
with Triton in ``vllm-0.34.0/triton``; .ci/run does it). They name Hugging Face models: nothing is downloaded, the ``config.json`` files they
need are ours (``tokenbudget/harness/vllm/hf_configs/``), served from a local hub cache with ``HF_HUB_OFFLINE=1``.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from tokenbudget.harness.vllm.folder import child_env
from tokenbudget.harness.vllm.own_tests import TRITON_FOLDER, hub_cache, needs_triton, offline_env, platform_env, \
    scheduler_test_files, triton_at_hand

pytestmark = pytest.mark.vllm
OWN_TESTS_ENV = "TOKENBUDGET_VLLM_OWN_TESTS"


def outcomes(junit: Path) -> dict[str, str]:
    """Each test's outcome in a junit file: passed, failed, error or skipped."""
    found = {}
    for case in ET.parse(junit).getroot().iter("testcase"):
        kinds = [child.tag for child in case if child.tag in ("failure", "error", "skipped")]
        found[f"{case.get('classname')}::{case.get('name')}"] = {"failure": "failed"}.get(kinds[0], kinds[0]) \
            if kinds else "passed"
    return found


def start_own_tests(folder: Path, env: dict[str, str], junit: Path, *plugin: str) -> subprocess.Popen[str]:
    """vLLM's tests in a child pytest, its output in JUNIT.log. Their own empty ini and rootdir:
    a folder inside this checkout (.engines/) would otherwise take our pyproject's options."""
    files = scheduler_test_files(folder)
    ini = junit.with_suffix(".ini")
    ini.write_text("[pytest]\n")
    with junit.with_suffix(".log").open("w") as log:  # the child keeps its own copy open
        return subprocess.Popen([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:xdist",
                                 "-c", str(ini), f"--rootdir={folder}", f"--junitxml={junit}", *plugin, *files],
                                cwd=folder, env=env, stdout=log, stderr=subprocess.STDOUT, text=True)


def judged(folder: Path, env: dict[str, str], tmp: Path) -> None:
    """Both runs at once (one core each), then their outcomes compared."""
    env = {**env, **offline_env(hub_cache(tmp / "hf"))}
    lines = tmp / "judged.jsonl"
    runs = [start_own_tests(folder, env, tmp / "plain.xml"),
            start_own_tests(folder, env, tmp / "strict.xml", "--tokenbudget=strict", f"--tokenbudget-out={lines}")]
    for run in runs:
        run.wait(timeout=1800)
    for name in ("plain", "strict"):
        assert (tmp / f"{name}.xml").is_file(), (tmp / f"{name}.log").read_text()[-3000:]
    plain, strict = outcomes(tmp / "plain.xml"), outcomes(tmp / "strict.xml")
    changed = {test: (was, strict.get(test)) for test, was in plain.items() if strict.get(test) != was}
    assert plain and not changed, changed
    docs = [json.loads(line) for line in lines.read_text().splitlines()]
    violations = [(d["test"], v["invariant"], v["message"]) for d in docs for v in d["violations"]]
    assert violations == []
    assert sum(d["steps"] for d in docs) > 0


def own_tests(version: str) -> Path:
    value = os.environ.get(OWN_TESTS_ENV)
    folder = Path(value or ".") / f"vllm-{version}"
    if not value or not (folder / "tests" / "v1" / "core").is_dir():
        pytest.skip(f"needs vLLM {version}'s own tests in ${OWN_TESTS_ENV}/vllm-{version}/tests "
                    f"(tokenbudget engine-tests vllm {version} DIR/vllm-{version})")
    return folder


def test_vllm_0_32_own_scheduler_tests_keep_their_outcomes_under_strict(vllm_imported: None, tmp_path: Path) -> None:
    judged(own_tests("0.32.0"), dict(os.environ), tmp_path)


def test_vllm_0_33_own_scheduler_tests_keep_their_outcomes_under_strict(vllm033_path: Path, tmp_path: Path) -> None:
    judged(own_tests("0.33.0"), child_env(vllm033_path), tmp_path)


def test_vllm_0_34_own_scheduler_tests_keep_their_outcomes_under_strict(vllm034_path: Path, tmp_path: Path) -> None:
    folder = own_tests("0.34.0")
    if needs_triton("0.34.0") and not triton_at_hand(folder):
        pytest.skip(f"vLLM 0.34.0's CPU platform needs Triton here, not in {folder / TRITON_FOLDER} "
                    "(tokenbudget engine-tests vllm 0.34.0 DIR installs it)")
    env = child_env(vllm034_path)
    judged(folder, {**env, **platform_env("0.34.0", folder, env.get("PYTHONPATH", ""))}, tmp_path)
