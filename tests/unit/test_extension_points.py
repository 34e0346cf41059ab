"""The public extension points of a user policy: shared config requirements it keeps or
drops, the method's name in BudgetParams (symbolic-safe), and what a loop variant changes."""
from __future__ import annotations

import pytest
import z3

from tokenbudget.model import BudgetConfig, ConfigError, VllmLoop, get_policy, ite
from tokenbudget.model.vllm.policies import VllmAdaptive
from tokenbudget.proofs.symbolic import SymbolicConfig


class AnyScheduledTokens(VllmAdaptive):
    name = "any-scheduled-tokens"

    def shared_requirements(self, c):
        return [r for r in super().shared_requirements(c) if r.name != "max_num_scheduled_tokens-positive"]

    def requirements(self, p):
        return [r for r in super().requirements(p) if r.name != "token-cap-positive"]


def test_a_policy_drops_a_shared_requirement_by_name():
    cfg = BudgetConfig(max_num_scheduled_tokens=-1)  # BudgetConfig leaves it to the policy
    with pytest.raises(ConfigError, match="max_num_scheduled_tokens must be at least 1"):
        get_policy("vllm-adaptive").validate(cfg)
    AnyScheduledTokens().validate(cfg)


def test_the_structural_requirements_hold_whatever_the_policy():
    with pytest.raises(ConfigError, match="max_num_seqs must be at least 1"):
        BudgetConfig(max_num_seqs=0)


def test_the_prover_sees_a_dropped_requirement():
    sc = SymbolicConfig(AnyScheduledTokens(), scheduled_tokens_set=True)
    s = z3.Solver()
    s.add(sc.domain, sc.accepts, sc.knobs["max_num_scheduled_tokens"] < 0)
    assert s.check() == z3.sat
    s = z3.Solver()
    kept = SymbolicConfig(VllmAdaptive(), scheduled_tokens_set=True)
    s.add(kept.domain, kept.accepts, kept.knobs["max_num_scheduled_tokens"] < 0)
    assert s.check() == z3.unsat


def test_params_carry_the_method_on_ints_and_terms():
    policy = VllmAdaptive()
    assert policy.params(BudgetConfig(num_speculative_tokens=2, method="ngram")).method == "ngram"
    assert policy.params(BudgetConfig()).method is None
    sc = SymbolicConfig(policy, scheduled_tokens_set=False)
    is_ngram = sc.params.method == "ngram"
    rows = ite(is_ngram, 0, sc.params.draft_slots)  # the symbolic-safe way a user writes it
    for i, case in enumerate(sc.cases):
        model = z3.Solver()
        model.add(sc.selector == i)
        assert model.check() == z3.sat
        assert z3.is_true(model.model().eval(is_ngram, model_completion=True)) == (case.method == "ngram")
    assert isinstance(rows, z3.ArithRef)
    with pytest.raises(TypeError, match="compare it with =="):
        bool(sc.params.method)


def test_structure_changes_name_what_a_variant_changes():
    class Variant(VllmLoop):
        unschedules_refunded = False

        @classmethod
        def cursor_after_preemption(cls, index, victim_index):
            return index

    assert VllmLoop.structure_changes() == []
    assert Variant.structure_changes() == ["unschedules_refunded", "cursor_after_preemption"]
