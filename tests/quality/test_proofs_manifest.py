"""The verdict manifest's judgement: a flip, an unknown and a missing entry are problems; a
bounded proof at another N is not, however long a proof took. ``prove --update-manifest``
records the verdicts, and refuses when one is unknown."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tokenbudget import prove_cmd
from tokenbudget.cli import main
from tokenbudget.proofs import manifest
from tokenbudget.model import builtin_policies
from tokenbudget.proofs.manifest import Expected, problem
from tokenbudget.proofs.verdicts import PROVED, PROVED_UP_TO, REFUTED, UNKNOWN, Outcome
from tokenbudget.spec.corpus import corpus_paths
from tokenbudget.spec.trace import load_trace

pytestmark = pytest.mark.proofs


def outcome(verdict: str, seconds: float = 1.0, bound: int | None = None) -> Outcome:
    traces = (load_trace(corpus_paths()[0]),) if verdict == REFUTED else ()
    return Outcome("vllm-adaptive", "token-cap", verdict, "induction", seconds, "why", bound=bound, traces=traces)


PROVED_IN_2S = Expected(PROVED, None, "induction", 2.0)


def test_the_recorded_verdict_is_no_problem_however_long_it_took() -> None:
    assert problem(outcome(PROVED, seconds=2.0), PROVED_IN_2S) is None
    assert problem(outcome(PROVED, seconds=600.0), PROVED_IN_2S) is None


def test_a_flip_is_a_problem() -> None:
    assert "the manifest records proved" in problem(outcome(REFUTED), PROVED_IN_2S)


def test_an_unknown_is_a_problem_even_if_recorded() -> None:
    assert "unknown" in problem(outcome(UNKNOWN), Expected(UNKNOWN, None, "search", 1.0))


def test_a_missing_entry_is_a_problem() -> None:
    assert "records no verdict" in problem(outcome(PROVED), None)


def test_a_bounded_proof_matches_at_any_bound() -> None:
    recorded = Expected(PROVED_UP_TO, 8, "bounded", 1.0)
    assert problem(outcome(PROVED_UP_TO, bound=16), recorded) is None
    assert "proved up to 8" in problem(outcome(PROVED), recorded)


def _update(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, outcomes: list[Outcome],
            *argv: str) -> tuple[int, Path, list[Any]]:
    """``prove --update-manifest`` with ``prove`` answering ``outcomes``, writing under tmp_path."""
    asked: list[Any] = []

    def fake_prove(policies: list[str], options: Any, obligations: Any = None, jobs: int = 1,
                   progress: Any = None) -> list[Outcome]:
        asked.append((policies, obligations, jobs))
        return outcomes

    path = tmp_path / "manifest.json"
    monkeypatch.setattr(prove_cmd, "prove", fake_prove)
    monkeypatch.setattr(manifest, "PATH", str(path))
    return main(["prove", "--update-manifest", *argv]), path, asked


def test_update_manifest_records_every_builtin_verdict(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    code, path, asked = _update(monkeypatch, tmp_path, [outcome(PROVED, seconds=1.5)])
    assert code == 0 and f"recorded 1 verdicts in {path}" in capsys.readouterr().out
    policies, obligations, jobs = asked[0]
    assert obligations is None and jobs == 1 and "vllm-adaptive" in policies and len(policies) == len(builtin_policies())
    doc = json.loads(path.read_text())
    assert doc["format"] == manifest.FORMAT
    assert doc["verdicts"] == {"vllm-adaptive": {"token-cap": {"verdict": PROVED, "bound": None,
                                                               "method": "induction", "seconds": 1.5}}}


def test_update_manifest_refuses_an_unknown_verdict(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    code, path, _ = _update(monkeypatch, tmp_path, [outcome(UNKNOWN)])
    assert code == 1 and "not recorded: 1 unknown verdict(s)" in capsys.readouterr().out
    assert not path.exists()


def test_update_manifest_proves_every_builtin_or_nothing(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    code, path, asked = _update(monkeypatch, tmp_path, [outcome(PROVED)], "--policy", "vllm-static")
    _, err = capsys.readouterr()
    assert code == 2 and err.count("\n") == 1 and "drop --policy" in err
    assert not asked and not path.exists()
