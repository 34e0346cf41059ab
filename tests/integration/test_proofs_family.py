"""Concrete and symbolic runs agree: on random concrete configs, and on random family traces.

The symbolic config runs the policy's own ``params`` and ``requirements`` on z3 terms;
pinned to a concrete config it must give the concrete params and the same acceptance.
A family (``proofs.trace_family``) computes every step of a trace symbolically; pinned to
random inputs, its trace must replay on the Scheduler with exactly the grants it computed.
"""
from __future__ import annotations

import random
from dataclasses import fields

import pytest
import z3
from proof_budgets import Z3_TIMEOUT_S

from tokenbudget.model import TABLES, BudgetConfig, BudgetParams, ConfigError, get_policy
from tokenbudget.proofs.trace_family import Family
from tokenbudget.proofs.solving import solver, value
from tokenbudget.proofs.symbolic import PROVED_VLLM_VERSION, SymbolicConfig, SymbolicMethod
from tokenbudget.model.replay import replay_on_model
from tokenbudget.spec.trace import StepExpectation
from tokenbudget.proofs.loop_search import skeleton_policies

pytestmark = pytest.mark.proofs
POLICIES = skeleton_policies()


def random_knobs(rng: random.Random, policy: str) -> dict:
    k = rng.choice([0, 1, 2, 4, 6])
    max_len = rng.randint(1, 4096)
    knobs = dict(max_num_batched_tokens=rng.randint(1, 4096), max_num_seqs=rng.randint(1, 600),
                 num_speculative_tokens=k, method=rng.choice(sorted(TABLES[get_policy(policy).table])) if k else None,
                 parallel_drafting=bool(k) and rng.random() < 0.4, block_size=rng.choice([1, 16, 64]),
                 max_model_len=max_len, num_kv_blocks=max_len, long_prefill_token_threshold=rng.randint(0, max_len),
                 scheduling_policy=rng.choice(["fcfs", "priority"]), enable_chunked_prefill=rng.random() < 0.7,
                 enable_prefix_caching=rng.random() < 0.5)
    if rng.random() < 0.3:
        knobs["max_num_scheduled_tokens"] = rng.randint(1, 4096)
    if PROVED_VLLM_VERSION in get_policy(policy).versions:  # the version the prover follows
        knobs["engine_version"] = PROVED_VLLM_VERSION
    return knobs


@pytest.mark.parametrize("policy", POLICIES)
def test_symbolic_config_agrees_with_the_concrete_one(policy: str) -> None:
    rng = random.Random(policy)
    pol = get_policy(policy)
    symbolic = {scheduled_set: SymbolicConfig(pol, scheduled_set) for scheduled_set in (False, True)}
    for _ in range(40):
        knobs = random_knobs(rng, policy)
        cfg = BudgetConfig(**knobs)
        sc = symbolic[cfg.max_num_scheduled_tokens is not None]
        case = next(i for i, c in enumerate(sc.cases) if (c.method, c.parallel_drafting, c.scheduling_policy) ==
                    (cfg.method, cfg.parallel_drafting, cfg.scheduling_policy))
        pins = [sc.selector == case, *(term == getattr(cfg, name) for name, term in sc.knobs.items()
                                       if isinstance(term, z3.ExprRef))]
        s = solver(Z3_TIMEOUT_S, *pins)
        assert s.check() == z3.sat
        model = s.model()
        concrete = pol.params(cfg)
        for f in fields(BudgetParams):
            term = getattr(sc.params, f.name)
            if isinstance(term, SymbolicMethod):  # the method of the case the selector picks
                term = term.names[value(model, term.selector)]
            assert (term if isinstance(term, str) else value(model, term)) == getattr(concrete, f.name), f.name
        assert value(model, sc.lookahead) == pol.lookahead(cfg)
        try:
            pol.validate(cfg)
            accepted = True
        except ConfigError:
            accepted = False
        assert value(model, sc.accepts) == accepted
        assert sc.requirement_failed(model) is None if accepted else sc.requirement_failed(model)


def pinned_family_model(fam: Family, rng: random.Random) -> z3.ModelRef | None:
    """A model of the family with as many random pins as stay satisfiable, pinned a group
    at a time (the config, then each request), one pin at a time where a group does not fit."""
    sc = fam.sc
    groups = [[sc.max_num_batched_tokens == rng.randint(1, 24), sc.max_num_seqs == rng.randint(1, 4),
               sc.k == rng.choice([0, 1, 2, 3]), sc.selector == rng.randrange(len(sc.cases)),
               sc.max_model_len == rng.randint(4, 40), sc.long_prefill_token_threshold == rng.choice([0, 0, 1, 3]),
               sc.enable_chunked_prefill == (rng.random() < 0.8), sc.enable_prefix_caching == (rng.random() < 0.6),
               fam.prefix_len == rng.randint(1, 6)]]
    for r in fam.requests:
        groups.append([r.present == (rng.random() < 0.8), r.step == rng.randrange(fam.steps),
                       r.prompt == rng.randint(1, 30), r.priority == rng.randint(0, 2),
                       r.member == (rng.random() < 0.4), *(a == rng.randint(0, 3) for a in r.accepted)])
    s = solver(Z3_TIMEOUT_S, *fam.constraints)
    if s.check() != z3.sat:
        return None
    for group in groups:
        s.push()
        s.add(*group)
        if s.check() == z3.sat:
            continue
        s.pop()
        for pin in group:
            s.push()
            s.add(pin)
            if s.check() != z3.sat:
                s.pop()
    assert s.check() == z3.sat
    return s.model()


@pytest.mark.parametrize("policy", POLICIES)
def test_a_family_trace_replays_with_the_grants_it_computed(policy: str) -> None:
    rng = random.Random(policy)
    checked = 0
    for attempt in range(10):
        fam = Family(get_policy(policy), rng.randint(1, 3), rng.randint(1, 3), rng.random() < 0.25)
        model = pinned_family_model(fam, rng)
        if model is None:
            continue
        trace = fam.trace(model, None, "random family instance", "test")
        result = replay_on_model(trace)
        steps = [r for r in result.expectations if isinstance(r.expectation, StepExpectation)]
        assert steps and all(r.met for r in steps), [r.message for r in steps if not r.met]
        checked += 1
    assert checked >= 6
