"""One model, two interpretations: the budget arithmetic on ints and on z3 terms agrees."""
from __future__ import annotations

import random

import pytest
import z3

from tokenbudget.model import BudgetConfig, OnePassLoop, builtin_policies, get_policy
from tokenbudget.model import decisions
from tokenbudget.spec.intlike import and_, cdiv, ite, max_, min_, not_, or_
from tokenbudget.model.policy import BudgetParams


def evaluate(term):
    return z3.simplify(term).as_long() if isinstance(term, z3.ArithRef) else z3.is_true(z3.simplify(term))


def test_helpers_on_ints_and_terms():
    x = z3.Int("x")
    assert (min_(3, 5, 4), max_(3, 5, 4), cdiv(9, 4), ite(True, 1, 2)) == (3, 5, 3, 1)
    assert and_(True, 1 < 2) and or_(False, True) and not_(False)
    s = z3.Solver()
    s.add(x == 7)
    assert s.check() == z3.sat
    m = s.model()
    assert m.eval(min_(x, 5)).as_long() == 5 and m.eval(max_(x, 5)).as_long() == 7
    assert m.eval(cdiv(x, 4)).as_long() == 2 and z3.is_true(m.eval(and_(x > 1, not_(x > 9))))


def symbolic_params(p: BudgetParams) -> tuple[BudgetParams, dict]:
    """Replace every int field of p by a z3 constant bound to its value."""
    subst = {}
    fields = {}
    for name, value in p.__dict__.items():
        if isinstance(value, (bool, str)) or value is None:  # flags and the method's name stay Python values
            fields[name] = value
        else:
            const = z3.Int(name)
            subst[name] = (const, z3.IntVal(value))
            fields[name] = const
    return BudgetParams(**fields), subst


CONFIGS = [
    dict(max_num_batched_tokens=640, max_num_seqs=128, max_model_len=1024, num_speculative_tokens=4, method="mtp"),
    dict(max_num_batched_tokens=8192, max_num_seqs=64, max_model_len=4096, num_speculative_tokens=3,
         method="ngram"),
    dict(max_num_batched_tokens=2048, max_num_seqs=256, max_model_len=4096),
]


@pytest.mark.parametrize("name", list(builtin_policies()))
def test_policy_arithmetic_agrees_on_ints_and_terms(name):
    policy = get_policy(name)
    rng = random.Random(name)
    for knobs in CONFIGS:
        cfg = BudgetConfig(**knobs)
        p = policy.params(cfg)
        sym, subst = symbolic_params(p)
        pairs = list(subst.values())
        for _ in range(20):
            decoding, demand, computed = rng.randint(0, 64), rng.randint(1, 3000), rng.randint(0, 900)
            concrete = policy.initial_budgets(p, decoding)
            symbolic = policy.initial_budgets(sym, z3.IntVal(decoding))
            assert evaluate(z3.substitute(z3.IntVal(0) + symbolic.token, *pairs)) == concrete.token
            grant = decisions.running_grant(policy, p, concrete, demand, computed, 512, 1024, False)
            sym_grant = decisions.running_grant(policy, sym, symbolic, z3.IntVal(demand), z3.IntVal(computed),
                                                z3.IntVal(512), z3.IntVal(1024), False)
            assert evaluate(z3.substitute(sym_grant, *pairs)) == grant
            pads = issubclass(policy.loop, OnePassLoop) and policy.loop.pads_short_admissions
            adm = decisions.admission(policy, p, concrete, demand, computed, 0, 1024, cfg.num_speculative_tokens, pads,
                                      False, True, True)
            sym_adm = decisions.admission(policy, sym, symbolic, z3.IntVal(demand), z3.IntVal(computed), z3.IntVal(0),
                                          z3.IntVal(1024), z3.IntVal(cfg.num_speculative_tokens), pads,
                                          z3.BoolVal(False), z3.BoolVal(True), z3.BoolVal(True))
            assert evaluate(z3.substitute(sym_adm.grant, *pairs)) == adm.grant
            assert evaluate(z3.substitute(z3.simplify(z3.And(sym_adm.stop, True)), *pairs)) == bool(adm.stop)
            assert evaluate(z3.substitute(z3.IntVal(0) + policy.charge(sym, sym_grant, False).token, *pairs)) == \
                policy.charge(p, grant, False).token
            assert bool(policy.may_schedule(p, concrete)) == evaluate(
                z3.substitute(z3.And(policy.may_schedule(sym, symbolic), True), *pairs))


def test_victim_rule_on_ints_and_terms():
    """``decisions.victim`` picks vLLM's victim, ``max(running, key=(priority, arrival))``
    or the tail of the running queue, on ints and on z3 terms alike."""
    rng = random.Random(0)
    for _ in range(200):
        n = rng.randint(1, 6)
        running = [rng.random() < 0.7 for _ in range(n)]
        priority, arrival = [rng.randint(0, 2) for _ in range(n)], rng.sample(range(20), n)
        for priority_scheduling in (False, True):
            onehot = decisions.victim(priority_scheduling, running, priority, arrival)
            candidates = [v for v in range(n) if running[v]]
            if not candidates:
                assert not any(onehot)
                continue
            expected = (max(candidates, key=lambda v: (priority[v], arrival[v])) if priority_scheduling
                        else candidates[-1])
            assert onehot == [v == expected for v in range(n)]
            terms = decisions.victim(z3.BoolVal(priority_scheduling), [z3.BoolVal(r) for r in running],
                                     [z3.IntVal(x) for x in priority], [z3.IntVal(x) for x in arrival])
            assert [evaluate(t) for t in terms] == onehot


def test_output_and_demand_decisions_on_ints_and_terms():
    rng = random.Random(1)
    for _ in range(200):
        before, grant, num_tokens = rng.randint(0, 20), rng.randint(1, 6), rng.randint(1, 30)
        padded, accepted, drafts = rng.random() < 0.2, rng.randint(0, 5), rng.randint(-1, 4)
        taken = decisions.accepted_drafts(padded, accepted, drafts)
        assert taken == (0 if padded else max(0, min(accepted, drafts)))
        assert evaluate(decisions.accepted_drafts(z3.BoolVal(padded), z3.IntVal(accepted), z3.IntVal(drafts))) == taken
        for in_grant in (False, True):
            after = decisions.computed_after_output(in_grant, before + grant, before, grant, num_tokens, taken)
            assert after == (num_tokens + taken if in_grant else before + grant + taken)
            assert evaluate(decisions.computed_after_output(in_grant, z3.IntVal(before + grant), z3.IntVal(before),
                                                            z3.IntVal(grant), z3.IntVal(num_tokens),
                                                            z3.IntVal(taken))) == after
        n = rng.randint(0, 5)
        running = [rng.random() < 0.5 for _ in range(n)]
        tokens, drafts_, computed = ([rng.randint(0, 9) for _ in range(n)] for _ in range(3))
        seqs = rng.randint(1, 4)
        unserved = decisions.unserved_demand(seqs, running, [not r for r in running], tokens, drafts_, computed)
        wanted = sum(max(0, t + d - c) for r, t, d, c in zip(running, tokens, drafts_, computed) if r)
        if sum(running) < seqs:
            wanted += sum(t - c for r, t, c in zip(running, tokens, computed) if not r)
        assert unserved == wanted
        term = decisions.unserved_demand(z3.IntVal(seqs), [z3.BoolVal(r) for r in running],
                                         [z3.BoolVal(not r) for r in running], *([z3.IntVal(x) for x in xs]
                                                                                 for xs in (tokens, drafts_, computed)))
        assert evaluate(z3.IntVal(0) + term) == unserved
