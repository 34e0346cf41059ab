"""The prover judges the code a user brings: a branch on a z3 term is one named error, a
path on which the model raises is a ``model-error`` refutation that replays, a config-sound
counterexample replays with its violation, and a refund that gives back too little leaves
the caps proved (induction with strengthening) instead of unknown."""
from __future__ import annotations

import inspect
from dataclasses import replace

import pytest
import z3

import prover_user_policies as users
from proof_budgets import Z3_TIMEOUT_S, generous
from tokenbudget.model import BudgetConfig, get_policy
from tokenbudget.model.replay import replay_on_model
from tokenbudget.model.vllm.policies import VllmAdaptive
from tokenbudget.proofs.prove import prove
from tokenbudget.verdict import judge
from tokenbudget.proofs import solving
from tokenbudget.proofs.solving import minimise
from tokenbudget.proofs.symbolic_branch import SymbolicBranchError
from tokenbudget.proofs.verdicts import MODEL_SEARCH, PROVED, PROVED_UP_TO, REFUTED
from tokenbudget.spec.trace import ViolationExpectation

pytestmark = [pytest.mark.quality, pytest.mark.proofs]
OPTIONS = generous(2)
MODULE = "prover_user_policies"


def line_of(cls: type, text: str) -> int:
    lines, first = inspect.getsourcelines(cls)
    return first + next(i for i, line in enumerate(lines) if text in line)


@pytest.mark.parametrize("name, method, text, helper", [
    ("GrantBranchesWithIf", "grant", "if wanted", "ite("),
    ("ChargeWithMax", "charge", "max(grant", "max_("),
    ("ExitRuleWithAnd", "may_schedule", " and ", "and_("),
])
def test_a_branch_on_a_z3_term_names_the_method_the_line_and_the_helper(name: str, method: str, text: str,
                                                                         helper: str) -> None:
    with pytest.raises(SymbolicBranchError) as caught:
        prove([f"{MODULE}:{name}"], OPTIONS, ["token-cap"])
    message = str(caught.value)
    assert "\n" not in message and f"{name}.{method}" in message, message
    assert f"prover_user_policies.py:{line_of(getattr(users, name), text)}" in message, message
    assert f"use {helper}" in message, message


def test_an_unguarded_branch_is_named_too(monkeypatch: pytest.MonkeyPatch) -> None:
    """A built-in patched in place is not wrapped by the policy guard; the prover names it all the same."""
    def grant(self, p, wanted, budgets):  # type: ignore[no-untyped-def]
        return wanted if wanted < budgets.token else budgets.token

    monkeypatch.setattr(VllmAdaptive, "grant", grant)
    with pytest.raises(SymbolicBranchError, match=r"grant \(.*test_prover_user_code\.py:\d+\).*use ite\("):
        prove(["vllm-adaptive"], OPTIONS, ["token-cap"])


def test_a_loop_that_raises_is_a_model_error_with_a_replaying_trace() -> None:
    spec = f"{MODULE}:LooseExitRule"
    [outcome] = prove([spec], OPTIONS, ["model-error"])
    assert outcome.verdict == REFUTED, outcome
    replayed = replay_on_model(outcome.traces[0])
    assert replayed.ok and "model-error" in {v.invariant for v in replayed.violations}, replayed.problems
    assert replayed.errors and "waiting loop granted 0" in replayed.errors[0]
    assert (spec, "model-error") in judge([outcome]).complaints


def test_the_correct_policy_never_makes_the_loop_raise() -> None:
    [outcome] = prove(["vllm-adaptive"], OPTIONS, ["model-error"])
    assert outcome.verdict == PROVED and outcome.method == "induction", outcome


def test_a_config_sound_counterexample_blocked_by_the_exit_rule_replays_with_progress() -> None:
    [outcome] = prove([f"{MODULE}:StrictExitRule"], OPTIONS, ["config-sound"])
    assert outcome.verdict == REFUTED, outcome
    trace = outcome.traces[0]
    cfg = get_policy(trace.policy).params(BudgetConfig(**trace.config))
    assert trace.config["max_num_batched_tokens"] <= cfg.draft_slots + 1  # the exit rule refuses the first pass
    replayed = replay_on_model(trace)
    assert replayed.ok and "progress" in {v.invariant for v in replayed.violations}, replayed.problems


def test_a_refund_that_gives_back_too_little_leaves_the_caps_proved() -> None:
    outcomes = prove([f"{MODULE}:RefundForgetsDraftSlots"], OPTIONS, ["token-cap", "input-rows-cap"])
    assert [(o.verdict, o.method) for o in outcomes] == [(PROVED, "induction")] * 2, outcomes


def test_minimise_is_lexicographic_and_keeps_a_model_when_z3_gives_up() -> None:
    x, y = z3.Ints("x y")
    constraints = [x >= 0, y >= 0, x + y >= 5, x * x + y >= 7]
    model = minimise(constraints, [x, y], Z3_TIMEOUT_S, "a test")
    assert (model.eval(x).as_long(), model.eval(y).as_long()) == (0, 7)
    start = z3.Solver()
    start.add(*constraints, x == 40, y == 40)
    assert start.check() == z3.sat
    hurried = minimise(constraints, [x, y], 1e-9, "a test", start=start.model())
    assert all(z3.is_true(hurried.eval(c, model_completion=True)) for c in constraints)



def test_minimise_stops_once_it_has_spent_its_effort(monkeypatch: pytest.MonkeyPatch) -> None:
    x, y = z3.Ints("x y")
    constraints = [x >= 0, y >= 0, x + y >= 5]
    start = z3.Solver()
    start.add(*constraints, x == 40, y == 40)
    assert start.check() == z3.sat
    monkeypatch.setattr(solving, "MINIMISE_EFFORT", 1)
    spent = minimise(constraints, [x, y], Z3_TIMEOUT_S, "a test", start=start.model())
    assert (spent.eval(x).as_long(), spent.eval(y).as_long()) == (40, 40)  # the start, never lost


REFUND_TWICE = "real_bugs.vllm_refund_twice:Policy"
ROLLBACK_KEEPS_VICTIM = "real_bugs.vllm_rollback_scheduled_list:Policy"
THREE = generous(3)  # the refund bugs need three requests


def test_a_counterexample_of_an_earlier_obligation_is_reused_when_it_breaks_a_later_one() -> None:
    token, rows = prove([REFUND_TWICE], THREE, ["token-cap", "input-rows-cap"])
    assert (token.verdict, rows.verdict) == (REFUTED, REFUTED), (token, rows)
    assert rows.traces[0].ops == token.traces[0].ops  # no smaller trace breaks input-rows-cap
    assert ViolationExpectation("input-rows-cap") in rows.traces[0].expect
    assert ViolationExpectation("token-cap") not in rows.traces[0].expect
    replayed = replay_on_model(rows.traces[0])
    assert replayed.ok and "input-rows-cap" in {v.invariant for v in replayed.violations}


def test_a_loop_induction_does_not_follow_gets_the_model_search_not_unknown() -> None:
    [outcome] = prove([ROLLBACK_KEEPS_VICTIM], THREE, ["seq-cap"])
    assert (outcome.verdict, outcome.method, outcome.bound) == (PROVED_UP_TO, MODEL_SEARCH, 3), outcome
    [refuted] = prove([ROLLBACK_KEEPS_VICTIM], THREE, ["spec-shape"])  # the small search still refutes first
    assert refuted.verdict == REFUTED and refuted.method == "search", refuted
    # config-complete judges a refused config by one bounded pass over every step obligation at once
    [complete] = prove([ROLLBACK_KEEPS_VICTIM], THREE, ["config-complete"])
    assert complete.verdict == REFUTED and "every step obligation holds there (up to 3 requests)" in complete.detail


NOT_AFFINE = (f"{MODULE}:ChargeFloor", f"{MODULE}:DflashRunnerRows")


def test_a_charge_or_rows_not_affine_in_the_grant_gets_a_verdict_on_every_obligation() -> None:
    """A ``max_`` floor in the charge or the runner rows: induction tracks the live sums, no obligation is unknown."""
    outcomes = {(o.policy, o.obligation): o for o in prove(list(NOT_AFFINE), OPTIONS)}
    assert all(o.verdict in (PROVED, PROVED_UP_TO, REFUTED) for o in outcomes.values()), \
        [o for o in outcomes.values() if o.verdict not in (PROVED, PROVED_UP_TO, REFUTED)]
    floor, dflash = NOT_AFFINE
    for obligation in ("token-cap", "input-rows-cap", "exact-refund"):
        for spec in NOT_AFFINE:
            assert (outcomes[spec, obligation].verdict, outcomes[spec, obligation].method) == (PROVED, "induction")
    assert outcomes[dflash, "input-budget-nonnegative"].verdict == PROVED
    short = outcomes[floor, "input-budget-nonnegative"]  # charged 4 slots with fewer left
    assert short.verdict == REFUTED, short
    replayed = replay_on_model(short.traces[0])
    assert replayed.ok and "input-budget-nonnegative" in {v.invariant for v in replayed.violations}
    complete = outcomes[floor, "config-complete"]  # unsafe at its smallest refused configs, judged further out
    assert complete.verdict == REFUTED and complete.traces[0].config["max_num_batched_tokens"] >= 4, complete


@pytest.mark.parametrize("spec, options", [(NOT_AFFINE[1], OPTIONS), (ROLLBACK_KEEPS_VICTIM, THREE)])
def test_one_policy_over_two_processes_gets_the_verdicts_of_one(spec: str, options: object) -> None:
    """Split over two processes (the loop variant's model search run once, before them, its parts in both),
    table order kept, and the model search's traces those of one process."""
    one, two = (prove([spec], options, jobs=jobs) for jobs in (1, 2))  # type: ignore[arg-type]
    assert [(o.obligation, o.verdict, o.bound) for o in two] == [(o.obligation, o.verdict, o.bound) for o in one]
    searched = [(a.traces, b.traces) for a, b in zip(one, two) if a.method == MODEL_SEARCH]
    assert all([t.ops for t in a] == [t.ops for t in b] for a, b in searched)


def test_a_counterexample_found_already_refutes_unless_the_search_finds_a_smaller_one() -> None:
    """A fuzz run's or a replay's trace (here the prover's own at S = 3) is handed to ``prove``: no smaller
    trace breaks exact-refund, so it is the refutation, re-expected and replaying."""
    spec = f"{MODULE}:RefundForgetsDraftSlots"
    [own] = prove([spec], THREE, ["exact-refund"])
    trace = own.traces[0]
    candidate = replace(trace, config={**trace.config, "max_num_seqs": trace.config["max_num_seqs"] + 1}, expect=())
    assert "exact-refund" in {v.invariant for v in replay_on_model(candidate).violations}
    [outcome] = prove([spec], THREE, ["exact-refund"], candidates=[candidate])
    assert outcome.verdict == REFUTED and outcome.traces[0].config == candidate.config, outcome
    assert outcome.traces[0].ops == candidate.ops and ViolationExpectation("exact-refund") in outcome.traces[0].expect
