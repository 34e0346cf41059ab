"""What conformance may call explained (no SGLang needed): a finding about the engine or a
simplification SPEC.md names, never the model being known to be wrong."""
from __future__ import annotations

from tokenbudget.harness import known_divergences
from tokenbudget.harness.sglang import known


def test_every_explanation_is_a_finding_or_a_simplification_with_its_spec_entry() -> None:
    assert {k.id for k in known.KNOWN} == {"sglang-grant-clip"}
    assert all(k.spec.startswith("SPEC.md §10") for k in known.KNOWN)
    for k in known.KNOWN + known_divergences.KNOWN:
        assert k.kind in ("finding", "simplification"), k
