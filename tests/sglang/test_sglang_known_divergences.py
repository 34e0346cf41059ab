"""What conformance may call explained (no SGLang needed): a finding about the engine or a
simplification SPEC.md names, never the model being known to be wrong; SGLang has none."""
from __future__ import annotations

from tokenbudget.harness.sglang import known
from tokenbudget.harness.vllm import known as vllm_known


def test_no_sglang_divergence_is_explained_away() -> None:
    assert known.KNOWN == ()
    for k in vllm_known.KNOWN:
        assert k.kind in ("finding", "simplification"), k
