"""``check --corpus DIR``: every trace a violation was found on is written there, replays
with that violation, and never replaces a file of the user's; without it, check says how."""
from __future__ import annotations

import io
import json
import sys
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path

import pytest

from tokenbudget import check
from tokenbudget.cli import main
from tokenbudget.model.replay import replay_on_model
from tokenbudget.spec.trace import load_trace

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
POLICY = "waiting_drafts_free:WaitingDraftsFree"  # forgets a prefill's draft slots: input-rows-cap


@pytest.fixture(autouse=True)
def corpus_and_fuzz_only(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(EXAMPLES))
    monkeypatch.setattr(check, "SECTIONS", (check.corpus_section, check.fuzz_section))
    monkeypatch.setattr(check, "FUZZ_EXAMPLES", 10)
    monkeypatch.setattr(check, "RARE_PATH_EXAMPLES", 5)


def run(*argv: str) -> tuple[int, str]:
    out = io.StringIO()
    with redirect_stdout(out), redirect_stderr(io.StringIO()):
        code = main(list(argv))
    return code, out.getvalue()


def test_the_traces_found_are_written_and_replay_their_violation(tmp_path: Path) -> None:
    mine = tmp_path / "waiting_drafts_free_WaitingDraftsFree-replay-seed-000-vllm-adaptive.json"
    mine.write_text("the user's own file")
    code, out = run("check", "--policy", POLICY, "--corpus", str(tmp_path), "--json")
    doc = json.loads(out)
    assert code == 1 and doc["corpus"] and len(doc["corpus"]) == doc["traces_found"]
    assert mine.read_text() == "the user's own file"
    assert str(tmp_path / "waiting_drafts_free_WaitingDraftsFree-replay-seed-000-vllm-adaptive-2.json") in doc["corpus"]
    shown = []
    for path in doc["corpus"]:
        result = replay_on_model(load_trace(path))
        assert result.policy == POLICY and result.violations, path
        shown += [v.invariant for v in result.violations]
    assert "input-rows-cap" in shown


def test_without_corpus_check_says_how_to_get_the_traces() -> None:
    code, out = run("check", "--policy", POLICY)
    assert code == 1 and "found; check --corpus DIR writes them" in out.splitlines()[-1]
