"""A failure's identity: its invariant and its mechanism (fuzz.failures.identity)."""
from __future__ import annotations

from tokenbudget.fuzz.failures import failure_class, identity, is_known, raising_site
from tokenbudget.spec.invariants import Violation


def crash(site: str) -> Violation:
    return Violation("model-error", 3, f"the scheduler raised AssertionError:  ({site})")


def test_a_crash_is_known_by_its_raising_site_not_its_kind() -> None:
    known = {identity(crash("scheduler.py:1579 in schedule"))}
    assert known == {"model-error@scheduler.py:schedule"}
    assert is_known(identity(crash("scheduler.py:1581 in schedule")), known)  # a line moved: the same site
    new = identity(crash("kv_cache_manager.py:40 in allocate_slots"))
    assert not is_known(new, known) and failure_class(new) is not failure_class(next(iter(known)))


def test_a_bare_kind_stands_for_every_mechanism_and_a_finding_names_its_own() -> None:
    shape = Violation("spec-shape", 1, "padded decode 10 got 1 rows")
    assert identity(shape) == "spec-shape" and identity(shape, "F1") == "spec-shape@F1"
    assert is_known("spec-shape@F1", {"spec-shape"}) and not is_known("spec-shape", {"spec-shape@F1"})
    assert raising_site("RuntimeError: boom (engine.py:1)") == "engine.py:1" and raising_site("no site") is None


def test_a_parting_is_known_by_the_rule_it_names() -> None:
    parted = Violation("conformance", 4, "same-step refund: request 2 (running): the model's pass ...")
    assert identity(parted) == "conformance@same-step refund"
    assert failure_class(identity(parted)).kind == "conformance"
