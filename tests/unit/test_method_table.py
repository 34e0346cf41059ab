"""The method table's drafting columns: which drafter each method uses, which methods vLLM
drafts only in parallel, and how many drafts the model drafter's first pass proposes."""
from __future__ import annotations

import pytest

from tokenbudget.model import methods
from tokenbudget.model.methods import MODEL_DRAFTER, NGRAM_DRAFTER, TABLES, VLLM_0_32, first_pass_drafts


def test_only_ngram_drafts_without_a_model() -> None:
    for table in TABLES:
        assert {m: methods.drafter(table, m) == NGRAM_DRAFTER for m in TABLES[table]} == {
            m: m == "ngram" for m in TABLES[table]}, table
    assert methods.drafter("vllm-0.32", None) is None
    assert methods.drafter("fastdeploy", "mtp") == MODEL_DRAFTER


def test_vllm_drafts_dflash_and_dspark_only_in_parallel() -> None:
    assert {m for m, row in VLLM_0_32.items() if row.parallel_only} == {"dflash", "dspark"}
    for m, row in VLLM_0_32.items():
        if row.parallel_only:  # the config's parallel_drafting changes nothing
            assert methods.draft_slots("vllm-0.32", m, 5, False) == methods.draft_slots("vllm-0.32", m, 5, True)


@pytest.mark.parametrize(("d", "k", "drafts"), [(0, 4, 1), (3, 4, 4), (4, 4, 4), (1, 1, 1), (1, 3, 2)])
def test_the_first_pass_fills_the_draft_slots_up_to_k(d: int, k: int, drafts: int) -> None:
    assert first_pass_drafts(d, k) == drafts
