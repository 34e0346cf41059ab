"""vLLM 0.34.0 through ``--engine-path``, the day it ships: it starts here (its CPU platform's
Triton check answered for scheduler-only use), conform compares it with the model of 0.34,
replay and fuzz print their JSON on stdout, a config 0.34 cannot take is one line naming
vLLM 0.34 and the fix, and F1 still raises. One child process (run_commands.py, the child
``--engine-path`` starts) runs every command, paying vLLM's import once."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tokenbudget.harness.vllm.folder import child_env
from tokenbudget.model.findings import FINDINGS

pytestmark = pytest.mark.vllm
CORPUS = Path(__file__).resolve().parents[2] / "tokenbudget" / "corpus"
RUN_COMMANDS = Path(__file__).with_name("run_commands.py")
NEWER = "0.99.0"  # a release newer than every modelled version: 0.34.0 with its version string faked
F1_RAISES_AT = "scheduler.py:1643"  # assert num_new_tokens == 1 + self.num_spec_tokens (vLLM 0.34.0)


@pytest.fixture(scope="module")
def ran(vllm034_path: Path, tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, Any]]:
    folder = tmp_path_factory.mktemp("vllm-0.34")
    engine = ["--engine-path", str(vllm034_path)]
    jobs = [
        ["tokenbudget", "conform", "--engine", "vllm", "--workloads", "30", "--seed", "3", *engine, "--json"],
        ["tokenbudget", "replay", str(CORPUS / "seed-000-vllm-adaptive-dflash-0.33.json"),
         str(FINDINGS["F1"].trace_path), str(CORPUS / "seed-000-vllm-adaptive-dflash-0.32.json"), "--target", "vllm",
         *engine, "--json"],
        ["tokenbudget", "replay", str(FINDINGS["F2"].trace_path), "--target", "vllm", *engine, "--json"],
        ["tokenbudget", "fuzz", "--target", "vllm", "--examples", "3", "--workers", "1", "--seed", "0", *engine,
         "--json"],
        ["vllm_version", NEWER],
        ["tokenbudget", "conform", "--engine", "vllm", "--workloads", "10", "--seed", "3", *engine, "--json"],
        ["tokenbudget", "replay", str(CORPUS / "seed-000-vllm-adaptive-dflash-0.33.json"), "--target", "vllm", *engine,
         "--json"],
        ["tokenbudget", "fuzz", "--target", "vllm", "--examples", "3", "--workers", "1", "--seed", "0", *engine,
         "--json"],
    ]
    (folder / "jobs.json").write_text(json.dumps(jobs))
    done = subprocess.run([sys.executable, str(RUN_COMMANDS), str(folder / "jobs.json"), str(folder / "results.json")],
                          cwd=folder, env=child_env(vllm034_path), capture_output=True, text=True, timeout=900,
                          check=False)
    assert (folder / "results.json").exists(), done.stdout[-2000:] + done.stderr[-2000:]
    results = json.loads((folder / "results.json").read_text())
    if isinstance(results, dict):
        pytest.skip(f"vLLM 0.34.0 does not import: {results['unavailable']}")
    return list(results)


def stdout_json(command: dict[str, Any]) -> Any:
    assert command["stdout"], command["stderr"][-2000:]
    return json.loads(command["stdout"])


def test_conform_compares_0_34_with_its_own_model(ran: list[dict[str, Any]]) -> None:
    report = stdout_json(ran[0])
    assert report["release"] == "0.34.0" and report["model_version"] == "0.34" and report["warning"] is None
    assert report["ok"] and report["agreeing"] >= 29, report["divergences"]
    assert all(d["explanation"]["id"] == "F1" for d in report["divergences"])


def test_replay_grants_dflash_with_no_draft_slots_and_f1_still_raises(ran: list[dict[str, Any]]) -> None:
    dflash, f1, written_for_0_32 = stdout_json(ran[1])["traces"]
    assert dflash["engine_version"].startswith("vLLM 0.34.")
    assert dflash["steps"][0]["num_scheduled_tokens"] == {"0": 10, "1": 10}
    assert any(F1_RAISES_AT in e and "AssertionError" in e for e in f1["errors"]), f1["errors"]
    # a 0.32 trace runs on 0.34's runner, which DFlash drafts without slots: judged by 0.34's method table
    assert written_for_0_32["steps"][0]["num_scheduled_tokens"] == {"0": 10, "1": 10}
    assert not written_for_0_32["violations"], written_for_0_32["violations"]


def test_a_config_0_34_cannot_take_is_one_line_naming_it_and_the_fix(ran: list[dict[str, Any]]) -> None:
    refused = ran[2]
    lines = refused["stderr"].strip().splitlines()  # the engine's banner, then the one error line
    errors = [line for line in lines if "error:" in line]
    assert refused["code"] == 2 and refused["stdout"] == "" and errors == lines[-1:], refused
    assert errors[0].startswith("tokenbudget: error: vLLM 0.34 has no parallel drafting with method 'eagle3'")
    assert "parallel_drafting=false" in errors[0] and "refuses the config" not in errors[0]


def test_fuzz_prints_its_report_on_stdout(ran: list[dict[str, Any]]) -> None:
    report = stdout_json(ran[3])
    assert ran[3]["code"] in (0, 1, 4) and report["target"] == "vllm", ran[3]["stderr"][-2000:]
    assert "Traceback" not in ran[3]["stderr"]


def test_a_release_newer_than_every_model_is_judged_against_the_newest_saying_so(ran: list[dict[str, Any]]) -> None:
    conform, replay, fuzz = ran[5:8]
    said = (f"tokenbudget: warning: vLLM {NEWER} is newer than every modelled version; comparing it with the model of "
            "vLLM 0.34, the newest")
    for command in (conform, replay, fuzz):
        assert said in command["stderr"] and f"vLLM {NEWER} from " in command["stderr"], command["stderr"][-2000:]
        assert "Traceback" not in command["stderr"]
    report = stdout_json(conform)
    assert report["release"] == NEWER and report["model_version"] == "0.34" and report["ok"], report["divergences"]
    trace = stdout_json(replay)["traces"][0]
    assert trace["ok"] and trace["engine_version"].startswith(f"vLLM {NEWER}")
    assert stdout_json(fuzz)["target"] == "vllm"
