"""The verdict manifest's judgement: a flip, an unknown and a missing entry are problems;
a bounded proof at another N is not."""
from __future__ import annotations

import pytest

from tokenbudget.spec.corpus import corpus_paths
from tokenbudget.proofs.manifest import Expected, problem
from tokenbudget.proofs.verdicts import PROVED, PROVED_UP_TO, REFUTED, UNKNOWN, Outcome
from tokenbudget.spec.trace import load_trace

pytestmark = pytest.mark.proofs


def outcome(verdict: str, seconds: float = 1.0, bound: int | None = None) -> Outcome:
    traces = (load_trace(corpus_paths()[0]),) if verdict == REFUTED else ()
    return Outcome("vllm-adaptive", "token-cap", verdict, "induction", seconds, "why", bound=bound, traces=traces)


PROVED_IN_2S = Expected(PROVED, None, "induction", 2.0)


def test_the_recorded_verdict_is_no_problem() -> None:
    assert problem(outcome(PROVED, seconds=2.0), PROVED_IN_2S) is None


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
