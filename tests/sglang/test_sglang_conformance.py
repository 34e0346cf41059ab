"""SGLang 0.5.23's PrefillAdder, check_decode_mem, retract_decode and radix cache, on CPU allocators,
in lockstep with the model: the released policy agrees on every workload, the radix cache on and off; the
bug-era policy (``sglang-v1-retract``) against the released code is a divergence nothing
explains; the command's exit codes and its one error line."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tokenbudget.harness.sglang.runtime import CHILD_ENV, PATH_ENV
from tokenbudget.harness.sglang.workloads import POLICY, workload
from tokenbudget.model import BudgetConfig, get_policy

BOTH = """
import contextlib, io, json, sys
from pathlib import Path
from tokenbudget.cli import main
from tokenbudget.harness.conform import run_conformance
from tokenbudget.harness.sglang.conform import sglang_engine
folder, corpus, planted = sys.argv[1:4]
out, err = io.StringIO(), io.StringIO()
with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
    code = main(["conform", "--engine", "sglang", "--workloads", "10", "--seed", "0", "--json", "--quiet",
                 "--corpus", corpus])  # SGLang's folder from $TOKENBUDGET_SGLANG_PATH
off = io.StringIO()
with contextlib.redirect_stdout(off), contextlib.redirect_stderr(io.StringIO()):
    off_code = main(["conform", "--engine", "sglang", "--workloads", "6", "--seed", "1", "--radix-cache", "off",
                     "--json", "--quiet", "--corpus", corpus])
report = run_conformance(0, 4, Path(planted), engine=sglang_engine(Path(folder), policy="sglang-v1-retract"))
print(json.dumps({"command": [code, out.getvalue(), err.getvalue()], "off": [off_code, off.getvalue()],
                  "planted": report.to_json()}))
"""


def _start(argv: list[str], env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, *argv], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, **(env or {})})


def _finish(proc: subprocess.Popen[str]) -> tuple[int, str, str]:
    out, err = proc.communicate(timeout=600)
    return proc.returncode, out, err


@pytest.fixture(scope="module")
def runs(sglang_folder: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The command on 10 workloads, then the planted run on 4, in one child process that
    loads SGLang once (~10 s, most of the time of each): the child the command itself would
    start (``CHILD_ENV``), so the command runs there in-process."""
    corpus, planted = tmp_path_factory.mktemp("conform"), tmp_path_factory.mktemp("planted")
    code, out, err = _finish(_start(["-c", BOTH, str(sglang_folder), str(corpus), str(planted)],
                                    {PATH_ENV: str(sglang_folder), CHILD_ENV: str(sglang_folder)}))
    assert code == 0, err[-2000:]
    return json.loads(out)  # type: ignore[no-any-return]


@pytest.mark.sglang
def test_released_policy_agrees_on_every_workload(runs: dict[str, Any]) -> None:
    code, out, err = runs["command"]
    assert code == 0, err[-2000:]
    doc = json.loads(out)
    assert doc["engine"] == "sglang" and doc["policy"] == POLICY and doc["release"] == "0.5.23"
    assert doc["workloads"] == 10 and doc["ok"] and doc["unexplained"] == 0
    assert doc["agreeing"] == 10 and not doc["divergences"] and doc["steps_agreeing"] > 0
    code, out = runs["off"]
    doc = json.loads(out)
    assert code == 0 and doc["ok"] and doc["agreeing"] == doc["workloads"] == 6


@pytest.mark.sglang
def test_the_bug_era_policy_against_the_released_code_is_unexplained(runs: dict[str, Any]) -> None:
    """Its first decode already holds fewer pages: spec v1 reserves committed + A (and frees the
    rejected drafts' KV), 0.5.23 committed + 2A; the grants are the same."""
    doc = runs["planted"]
    assert not doc["ok"] and doc["unexplained"] >= 1
    unexplained = [d for d in doc["divergences"] if d["explanation"] is None]
    reservations = [d for d in unexplained if d["fields"] == ["kv_blocks_in_use"]]
    assert reservations, unexplained
    d = reservations[0]
    assert d["model"]["kv_blocks_in_use"] < d["engine"]["kv_blocks_in_use"]
    assert d["model"]["num_scheduled_tokens"] == d["engine"]["num_scheduled_tokens"]


def _one_error_line(code: int, out: str, err: str) -> str:
    assert code == 2 and out == "", (code, out, err)
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("tokenbudget: error: "), err
    return lines[0]


def test_missing_sglang_is_one_line_naming_the_install_command(tmp_path: Path) -> None:
    line = _one_error_line(*_finish(_start(["-m", "tokenbudget.cli", "conform", "--engine", "sglang",
                                            "--engine-path", str(tmp_path), "--workloads", "1"])))
    assert str(tmp_path) in line and "pip install --no-deps --target" in line and "sglang==0.5.23" in line
    line = _one_error_line(*_finish(_start(["-m", "tokenbudget.cli", "conform", "--engine", "sglang", "--json"],
                                           {PATH_ENV: str(tmp_path / "none")})))
    assert "none" in line and "is not installed" in line


def test_workloads_are_seeded_and_valid_for_the_released_policy() -> None:
    policy = get_policy(POLICY)
    pages, grouped = set(), 0
    for index in range(40):
        trace = workload(3, index)
        assert trace == workload(3, index) and trace.policy == POLICY
        cfg = BudgetConfig.from_dict(trace.config)
        policy.validate(cfg)
        assert cfg.enable_prefix_caching and cfg.num_speculative_tokens >= 1
        off = workload(3, index, radix=False)  # the same stream, the radix cache off
        assert off.ops == trace.ops and off.config == {**trace.config, "enable_prefix_caching": False}
        pages.add(cfg.block_size)
        grouped += any(getattr(op, "prefix_group", None) for op in trace.ops)
    assert workload(3, 0) != workload(4, 0) and pages == {1, 2, 4} and grouped >= 10
