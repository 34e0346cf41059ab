"""The invariant registry is the one table: predicates never restate an id, and the groups
that the checks, the prover and the user-policy rules use derive from its kinds."""
from __future__ import annotations

import inspect

from tokenbudget.proofs.induction import DECISION_PROPERTIES, LEDGER_INVARIANTS
from tokenbudget.proofs.loop_search import SEARCHED
from tokenbudget.proofs.obligations import STEP_OBLIGATIONS
from tokenbudget.spec import INVARIANTS
from tokenbudget.spec.invariants import KINDS, RUN_CHECKS, STEP_CHECKS, no_request_lost, progress
from tokenbudget.check import JUDGED, MEASURED


def test_no_predicate_restates_an_id() -> None:
    for inv in INVARIANTS.values():
        for predicate in (inv.predicate, inv.run_predicate):
            if predicate is not None:
                source = inspect.getsource(predicate)
                body = source[source.index(f"def {predicate.__name__}("):]  # past the decorator
                quoted = [i for i in INVARIANTS if f'"{i}"' in body or f"'{i}'" in body]
                assert not quoted, f"{predicate.__name__} names {quoted}"


def test_every_kind_is_known_and_used() -> None:
    assert {inv.kind for inv in INVARIANTS.values()} == set(KINDS)


def test_checks_derive_from_the_kinds() -> None:
    assert [inv.id for inv in STEP_CHECKS] == [
        "input-budget-nonnegative", "token-cap", "input-rows-cap", "exact-refund", "seq-cap", "kv-capacity",
        "model-len", "spec-shape", "placeholder-fresh", "encoder-cap", "encoder-ready", "model-error", "progress"]
    assert RUN_CHECKS == (no_request_lost, progress.over_run)
    engine_only = ("encoder-cap", "encoder-ready")
    assert [inv.id for inv in INVARIANTS.values() if inv.engine_only] == list(engine_only)
    assert JUDGED == (*(inv.id for inv in STEP_CHECKS[:-1] if inv.id not in engine_only), "no-request-lost", "progress")
    assert JUDGED == SEARCHED
    assert MEASURED == ("work-conserving",)


def test_the_provers_groups_derive_from_the_registry() -> None:
    assert LEDGER_INVARIANTS == ("input-budget-nonnegative", "token-cap", "input-rows-cap", "exact-refund", "seq-cap")
    assert DECISION_PROPERTIES == ("model-len", "spec-shape")
    assert STEP_OBLIGATIONS == LEDGER_INVARIANTS + DECISION_PROPERTIES
