"""The README's tutorial, run as written: its policy file saved in an empty folder, then each
of its commands in order in a shell there, each with the exit status the tutorial states.
``$VLLM`` is a copy of vLLM 0.33.0 with the tutorial's change made (its files linked, the
scheduler's one line edited). The only rewrite: ``PYTHONPATH=.`` keeps this checkout on the
import path too (a user's install needs no such thing)."""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from planted_line import replace_line  # noqa: E402

pytestmark = pytest.mark.vllm
ROOT = Path(__file__).resolve().parents[2]
SCHEDULER = Path("vllm/v1/core/sched/scheduler.py")
# The exit status of each command, in the tutorial's order, as its text states them.
EXITS = (1, 1, 0, 0, 1, 1)


def tutorial() -> str:
    text = (ROOT / "README.md").read_text()
    return text.split("## Tutorial:", 1)[1].split("\n## ", 1)[0]


def blocks(language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", tutorial(), re.S)


def changed_vllm(vllm033: Path, folder: Path) -> Path:
    """vLLM 0.33.0 as links to its files, but the scheduler, copied and changed as the tutorial says."""
    for source in (vllm033 / "vllm").rglob("*"):
        target = folder / source.relative_to(vllm033)
        if source.is_dir():
            target.mkdir(parents=True, exist_ok=True)
        else:
            target.symlink_to(source)
    (folder / SCHEDULER).unlink()
    (folder / SCHEDULER).write_text((vllm033 / SCHEDULER).read_text())
    replace_line(folder / SCHEDULER, "input_budget -= num_new_tokens + draft_slots", "input_budget -= num_new_tokens",
                 2)  # the waiting loop's charge
    return folder


def test_the_policy_in_the_tutorial_is_the_example() -> None:
    [policy] = blocks("python")
    assert policy == (ROOT / "examples" / "waiting_drafts_free.py").read_text()


def test_the_tutorial_runs_as_written(vllm_imported: None, vllm033_path: Path, tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    (work / "waiting_drafts_free.py").write_text(blocks("python")[0])
    env = {**os.environ, "VLLM": str(changed_vllm(vllm033_path, tmp_path / "vllm")),
           "XDG_CACHE_HOME": str(tmp_path / "cache")}
    commands = [line for block in blocks("bash") for line in block.splitlines() if line.strip()]
    assert len(commands) == len(EXITS), commands
    for command, wanted in zip(commands, EXITS):
        command = command.replace("PYTHONPATH=. ", f"PYTHONPATH=.:{ROOT} ")
        command = command.replace('PYTHONPATH="$VLLM" ', f'PYTHONPATH="$VLLM":{ROOT} ')
        done = subprocess.run(["bash", "-c", command], cwd=work, env=env, capture_output=True, text=True,
                              timeout=900)
        assert done.returncode == wanted, f"{command}\n{done.stdout[-3000:]}\n{done.stderr[-2000:]}"
    assert (work / "test_waiting_drafts_free.py").is_file()
    assert any((work / "found").glob("*-prove-input-rows-cap.json"))
