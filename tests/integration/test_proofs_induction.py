"""What induction proves, neither a small exhaustive search nor random runs of the
Scheduler can break; and induction says why when it cannot apply. That a bug planted in a
policy flips its verdict is a quality test (tests/quality/test_prover_flips.py).
"""
from __future__ import annotations

import functools
import random

import pytest
from proof_budgets import Z3_TIMEOUT_S

from tokenbudget.model import BudgetConfig, Budgets, ConfigError, get_policy, scheduler_for
from tokenbudget.model.vllm.policies import VllmAdaptive
from tokenbudget.proofs.induction import prove_by_induction
from tokenbudget.proofs.obligations import STEP_OBLIGATIONS
from tokenbudget.proofs.solving import value
from tokenbudget.proofs.trace_search import search
from tokenbudget.proofs.violations import VIOLATED
from tokenbudget.spec import check_step
from tokenbudget.spec.intlike import or_
from tokenbudget.proofs.loop_search import skeleton_policies

pytestmark = pytest.mark.proofs


def test_induction_tracks_a_charge_not_affine_in_the_grant() -> None:
    """A square token charge: its live sum is tracked, and covering the grants (g * g >= g) keeps the cap
    inductive; spec-shape (an admission's padding) is left to the search, as for the built-in."""
    class SquareCharge(VllmAdaptive):
        name = "square-charge"

        def charge(self, p, grant, is_decode):  # type: ignore[no-untyped-def]
            return Budgets(grant * grant, grant + p.draft_slots)

    result = prove_by_induction(SquareCharge(), Z3_TIMEOUT_S)
    assert result.proved["token-cap"] and result.proved["exact-refund"], result.reasons
    assert not result.proved["spec-shape"] and "an admission can break it" in result.reasons["spec-shape"]


@functools.cache
def proved_by_induction(policy: str) -> frozenset[str]:
    """The obligations induction proves for a built-in policy, asked once per policy."""
    return frozenset(name for name, ok in prove_by_induction(get_policy(policy), Z3_TIMEOUT_S).proved.items() if ok)


@pytest.mark.parametrize("policy", skeleton_policies())
def test_what_induction_proves_no_small_trace_breaks(policy: str) -> None:
    """One search for a trace that breaks any of the proved obligations (a search per
    obligation builds the same families again for each); a trace found names the first
    obligation it breaks."""
    proved = sorted(proved_by_induction(policy))

    def broken(families):  # type: ignore[no-untyped-def]
        return [VIOLATED[name](families[0].config, families[0].last) for name in proved]

    def first_broken(model, families):  # type: ignore[no-untyped-def]
        return next(name for name, term in zip(proved, broken(families)) if value(model, term))

    found = search([get_policy(policy)], lambda families: or_(*broken(families)), first_broken,
                   f"any of {', '.join(proved)}", 2, Z3_TIMEOUT_S, max_steps=2)
    assert found is None, found.traces[0].expect


@pytest.mark.parametrize("policy", skeleton_policies())
def test_what_induction_proves_no_random_run_breaks(policy: str) -> None:
    judged = proved_by_induction(policy) & set(STEP_OBLIGATIONS)
    rng = random.Random(policy)
    steps = 0
    while steps < 1500:
        k = rng.choice([0, 1, 2, 3])
        knobs = dict(max_num_batched_tokens=rng.randint(1, 16), max_num_seqs=rng.randint(1, 6),
                     num_speculative_tokens=k, method=rng.choice(["mtp", "ngram"]) if k else None,
                     block_size=rng.choice([1, 2, 4]), max_model_len=rng.randint(4, 40),
                     scheduling_policy=rng.choice(["fcfs", "priority"]), enable_chunked_prefill=rng.random() < 0.8,
                     enable_prefix_caching=rng.random() < 0.5)
        knobs["num_kv_blocks"] = -(-knobs["max_model_len"] // knobs["block_size"]) + rng.randint(0, 8)
        knobs["long_prefill_token_threshold"] = rng.choice([0, 0, rng.randint(1, knobs["max_model_len"])])
        try:
            sched = scheduler_for(BudgetConfig(**knobs), get_policy(policy))
        except ConfigError:
            continue
        for _ in range(rng.randint(1, 12)):
            for _ in range(rng.choice([0, 1, 2])):
                sched.add_request(f"r{len(sched.requests)}", rng.randint(1, knobs["max_model_len"] - 1),
                                  rng.randint(1, 10), rng.randint(0, 2))
            record = sched.schedule()
            steps += 1
            assert not {v.invariant for v in check_step(record)} & judged, check_step(record)
            sched.update_from_output(record, {rid: rng.randint(0, k) for rid in record.num_scheduled_tokens})
