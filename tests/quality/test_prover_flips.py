"""The prover runs the model's own code: a bug planted in a policy flips its verdict from
proved to refuted, the counterexample replays with the violation, and the manifest's judge
flags the flip. (The catalogue's planted bugs with a ``proof`` entry are proved the same
way by tests/quality/test_planted_bugs.py, refund-forgets-draft-slots among them.)"""
from __future__ import annotations

import pytest
from proof_budgets import generous

from tokenbudget.model import Budgets, get_policy
from tokenbudget.model.replay import replay_on_model
from tokenbudget.model.vllm.policies import VllmAdaptive
from tokenbudget.proofs.obligation_table import all_obligations, decide
from tokenbudget.verdict import judge
from tokenbudget.proofs.verdicts import PROVED, REFUTED

pytestmark = [pytest.mark.quality, pytest.mark.proofs]
OPTIONS = generous(8)


def verdict(policy: str, obligation: str):
    return decide(get_policy(policy), all_obligations()[obligation], OPTIONS)


def test_charging_without_draft_slots_flips_input_rows_cap(monkeypatch: pytest.MonkeyPatch) -> None:
    assert verdict("vllm-adaptive", "input-rows-cap").verdict == PROVED
    monkeypatch.setattr(VllmAdaptive, "charge", lambda self, p, grant, is_decode: Budgets(grant, grant))
    outcome = verdict("vllm-adaptive", "input-rows-cap")
    assert outcome.verdict == REFUTED and outcome.traces
    replayed = replay_on_model(outcome.traces[0])  # the planted bug is what the replay runs, too
    assert replayed.ok and "input-rows-cap" in {v.invariant for v in replayed.violations}
    assert "the manifest records proved" in judge([outcome]).problems[0]


def test_reporting_fewer_rows_than_the_runner_runs_flips_input_rows_cap(monkeypatch: pytest.MonkeyPatch) -> None:
    """The prover counts the engine's rows (the method table's), not the policy's own
    ``runner_rows``: charging and reporting a grant's rows without its draft slots is refuted,
    and the replay of the counterexample breaks input-rows-cap too."""
    monkeypatch.setattr(VllmAdaptive, "charge", lambda self, p, grant, is_decode: Budgets(grant, grant))
    monkeypatch.setattr(VllmAdaptive, "runner_rows", lambda self, p, grant, is_decode: grant)
    outcome = verdict("vllm-adaptive", "input-rows-cap")
    assert outcome.verdict == REFUTED and outcome.traces
    replayed = replay_on_model(outcome.traces[0])
    assert replayed.ok and "input-rows-cap" in {v.invariant for v in replayed.violations}
