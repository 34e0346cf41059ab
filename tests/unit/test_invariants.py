"""Each invariant predicate passes on a good record and fails on a hand-made bad one."""
from __future__ import annotations

from dataclasses import replace

import pytest

from factories import LIMITS, good_record
from tokenbudget.spec import INVARIANTS, LedgerEntry, RequestState, RunRecord, StepOutcome, check_step
from tokenbudget.spec import invariants as inv


def ids(violations):
    return {v.invariant for v in violations}


def test_good_record_holds_every_step_invariant():
    assert check_step(good_record()) == []


def test_invariant_table_matches_design_ids():
    assert list(INVARIANTS) == [
        "input-budget-nonnegative", "token-cap", "input-rows-cap", "exact-refund", "seq-cap", "kv-capacity",
        "model-len", "spec-shape", "placeholder-fresh", "encoder-cap", "encoder-ready", "model-error",
        "no-request-lost", "progress", "config-sound", "config-complete", "work-conserving",
    ]


def test_input_budget_negative_in_ledger():
    ledger = (LedgerEntry("grant", "0", 10, 20, 10, 20, 7), LedgerEntry("grant", "1", 8, 10, 2, 7, -4))
    assert ids(inv.input_budget_nonnegative(good_record(ledger=ledger))) == {"input-budget-nonnegative"}


def test_input_budget_untracked_is_not_judged():
    ledger = (LedgerEntry("grant", "0", 10, 20, 10, None, None),)
    assert inv.input_budget_nonnegative(good_record(ledger=ledger, initial_input_budget=None)) == []


def test_token_cap():
    assert inv.token_cap(good_record(num_scheduled_tokens={"0": 10, "1": 11})) != []
    assert inv.token_cap(good_record(num_scheduled_tokens={"0": 10, "1": 10})) == []


def test_input_rows_cap_names_rows_and_b():
    bad = good_record(runner_rows={"0": 13, "1": 8})
    [violation] = inv.input_rows_cap(bad)
    assert "21 rows" in violation.message and "B = 20" in violation.message


def test_exact_refund_accepts_a_matching_refund():
    ledger = (
        LedgerEntry("grant", "0", 10, 20, 10, 20, 7),
        LedgerEntry("refund", "0", 10, 10, 20, 7, 20),
        LedgerEntry("grant", "1", 4, 20, 16, 20, 13),
    )
    assert inv.exact_refund(good_record(ledger=ledger)) == []


@pytest.mark.parametrize(
    "refund",
    [
        LedgerEntry("refund", "0", 10, 10, 20, 7, 17),  # forgets the draft slots
        LedgerEntry("refund", "0", 10, 10, 21, 7, 20),  # gives one token too many
        LedgerEntry("refund", "1", 4, 10, 14, 7, 14),  # refunds a request with no grant
    ],
)
def test_exact_refund_rejects_a_wrong_refund(refund):
    ledger = (LedgerEntry("grant", "0", 10, 20, 10, 20, 7), refund)
    assert ids(inv.exact_refund(good_record(ledger=ledger))) == {"exact-refund"}


def test_exact_refund_rejects_a_refund_applied_twice():
    ledger = (
        LedgerEntry("grant", "0", 10, 20, 10, 20, 7),
        LedgerEntry("refund", "0", 10, 10, 20, 7, 20),
        LedgerEntry("refund", "0", 10, 20, 30, 20, 33),
    )
    assert ids(inv.exact_refund(good_record(ledger=ledger))) == {"exact-refund"}


def test_exact_refund_rejects_a_budget_jump_between_entries():
    ledger = (LedgerEntry("grant", "0", 10, 20, 10, 20, 7), LedgerEntry("grant", "1", 4, 11, 7, 7, 0))
    assert ids(inv.exact_refund(good_record(ledger=ledger))) == {"exact-refund"}


def test_seq_cap():
    assert inv.seq_cap(good_record(running=("0", "1", "2", "3", "4"))) != []
    assert inv.seq_cap(good_record(running=("0", "1", "2", "3"))) == []


def test_kv_capacity_pool_overflow():
    assert ids(inv.kv_capacity(good_record(kv_blocks_in_use=33))) == {"kv-capacity"}


def test_kv_capacity_request_without_lookahead_slots():
    # "0" needs 0 + 10 + 4 = 14 slots, i.e. 4 blocks of 4
    assert ids(inv.kv_capacity(good_record(block_tables={"0": (0, 1, 2), "1": (4, 5)}))) == {"kv-capacity"}


def test_kv_capacity_block_owned_twice():
    tables = {"0": (0, 1, 2, 3), "1": (3, 5)}
    assert ids(inv.kv_capacity(good_record(block_tables=tables))) == {"kv-capacity"}


def test_kv_capacity_shared_prefix_block_is_fine():
    tables = {"0": (0, 1, 2, 3), "1": (0, 5)}
    assert inv.kv_capacity(good_record(block_tables=tables, block_keys={0: ("group", "sys", 0)})) == []


def test_kv_capacity_shared_block_at_another_position_is_not():
    tables = {"0": (0, 1, 2, 3), "1": (5, 0)}
    assert ids(inv.kv_capacity(good_record(block_tables=tables, block_keys={0: "k"}))) == {"kv-capacity"}


def test_model_len():
    bad = good_record(computed_before={"0": 54, "1": 0})  # 54 + 10 + 1 > 64
    assert ids(inv.model_len(bad)) == {"model-len"}
    assert inv.model_len(good_record(computed_before={"0": 53, "1": 0})) == []


def test_spec_shape_too_many_drafts():
    assert ids(inv.spec_shape(good_record(scheduled_draft_tokens={"0": 5, "1": 0}, prefill=frozenset()))) == {
        "spec-shape"}


def test_spec_shape_prefill_with_drafts():
    assert ids(inv.spec_shape(good_record(scheduled_draft_tokens={"0": 2, "1": 0}))) == {"spec-shape"}


def test_spec_shape_padded_decode_must_be_one_plus_k():
    ok = good_record(num_scheduled_tokens={"0": 10, "1": 5}, scheduled_draft_tokens={"0": 0, "1": 4},
                     padded=frozenset({"1"}), prefill=frozenset({"0"}))
    assert inv.spec_shape(ok) == []
    cut = replace(ok, num_scheduled_tokens={"0": 10, "1": 3})
    assert ids(inv.spec_shape(cut)) == {"spec-shape"}


def test_progress_step():
    assert ids(inv.progress(good_record(num_scheduled_tokens={}, runner_rows={}))) == {"progress"}
    assert inv.progress(good_record(num_scheduled_tokens={}, runner_rows={}, progress_possible=False)) == []


def state(status, computed=0, outputs=0, max_tokens=4, prompt=10):
    return RequestState(status, computed, outputs, max_tokens, prompt)


def run_of(steps, outcomes, events, added=None):
    return RunRecord(LIMITS, added=added or {}, events=events, steps=steps, outcomes=outcomes)


def test_no_request_lost_holds_on_a_clean_run():
    rec = good_record()
    out = StepOutcome(0, {"0": state("running", 10, 1), "1": state("running", 4)})
    assert inv.no_request_lost(run_of([rec], [out], [("add", "0"), ("add", "1"), ("step", 0)])) == []


def test_no_request_lost_catches_a_lost_request():
    rec = good_record(running=("0",))
    out = StepOutcome(0, {"0": state("running", 10, 1)})
    found = inv.no_request_lost(run_of([rec], [out], [("add", "0"), ("add", "1"), ("step", 0)]))
    assert ids(found) == {"no-request-lost"} and "1 is in no queue" in found[0].message


def test_no_request_lost_catches_an_aborted_request_left_queued():
    rec = good_record()
    out = StepOutcome(0, {"0": state("running", 10, 1), "1": state("running", 4)})
    events = [("add", "0"), ("add", "1"), ("abort", "1"), ("step", 0)]
    assert ids(inv.no_request_lost(run_of([rec], [out], events))) == {"no-request-lost"}


def test_no_request_lost_names_a_request_queued_twice_and_one_never_added():
    rec = good_record(running=("0", "1"), waiting=("1", "2"))
    out = StepOutcome(0, {"0": state("running", 10, 1), "1": state("running", 4)})
    found = inv.no_request_lost(run_of([rec], [out], [("add", "0"), ("add", "1"), ("step", 0)]))
    assert [v.message for v in found] == ["1 is queued twice", "2 is queued but was never added"]


def test_no_request_lost_catches_too_many_outputs_and_going_back():
    rec = good_record()
    outs = [StepOutcome(0, {"0": state("running", 10, 1), "1": state("running", 4)}),
            StepOutcome(1, {"0": state("running", 12, 5), "1": state("running", 2)})]
    events = [("add", "0"), ("add", "1"), ("step", 0), ("step", 1)]
    found = inv.no_request_lost(run_of([rec, replace(rec, step=1)], outs, events))
    assert len(found) == 2
    assert any("outputs" in v.message for v in found) and any("went back" in v.message for v in found)


def test_a_late_rollback_beside_a_smaller_grant_is_no_loss_and_more_is():
    """Async: step 1 grants 1 while step 0's 2 drafts come back rejected (SPEC.md §14)."""
    drafted = good_record(num_scheduled_tokens={"0": 3}, scheduled_draft_tokens={"0": 2}, running=("0",), waiting=())
    decode = replace(drafted, step=1, num_scheduled_tokens={"0": 1}, scheduled_draft_tokens={"0": 0})
    events = [("add", "0"), ("step", 0), ("step", 1)]
    for after, lost in ((47, False), (46, True)):
        outs = [StepOutcome(0, {"0": state("running", 48, 1)}), StepOutcome(1, {"0": state("running", after, 2)})]
        found = inv.no_request_lost(run_of([drafted, decode], outs, events))
        assert [v.message for v in found] == ([f"0's computed tokens went back from 48 to {after} without preemption"]
                                              if lost else [])


def test_progress_bound_flags_a_starved_drain():
    idle = good_record(num_scheduled_tokens={}, running=(), waiting=("0",), progress_possible=False)
    added = {"0": state("waiting", max_tokens=1, prompt=1)}
    bound = inv.drain_bound(added)
    steps = [replace(idle, step=i) for i in range(bound)]
    outs = [StepOutcome(i, {}) for i in range(bound)]
    events = [("add", "0")] + [("step", i) for i in range(bound)]
    assert ids(inv.progress.over_run(run_of(steps, outs, events, added))) == {"progress"}
    short = run_of(steps[:-1], outs[:-1], events[:-1], added)
    assert inv.progress.over_run(short) == []


def test_drain_steps_left_counts_down_to_the_step_progress_bound_judges():
    idle = good_record(num_scheduled_tokens={}, running=(), waiting=("0",), progress_possible=False)
    added = {"0": state("waiting", max_tokens=1, prompt=1)}
    bound = inv.drain_bound(added)
    for steps in (1, bound - 1, bound, bound + 3):
        run = run_of([replace(idle, step=i) for i in range(steps)], [StepOutcome(i, {}) for i in range(steps)],
                     [("add", "0")] + [("step", i) for i in range(steps)], added)
        assert inv.drain_steps_left(run) == max(0, bound - steps)
        assert bool(inv.progress.over_run(run)) == (inv.drain_steps_left(run) == 0)


def test_config_probes():
    assert ids(inv.config_sound(inv.ConfigProbe(accepted=True, first_step_grants=0))) == {"config-sound"}
    assert inv.config_sound(inv.ConfigProbe(accepted=True, first_step_grants=3)) == []
    assert ids(inv.config_complete(inv.ConfigProbe(accepted=False, first_step_grants=3))) == {"config-complete"}
    assert inv.config_complete(inv.ConfigProbe(False, 3, ("input-rows-cap",))) == []


def test_work_gap_measures_unused_budget():
    # 20 - 14 tokens unused, 20 - 20 rows: no room for another request's rows
    assert inv.work_gap(good_record()) == 0
    lean = good_record(num_scheduled_tokens={"0": 4}, runner_rows={"0": 7}, unserved_demand=50)
    assert inv.work_gap(lean) == 20 - 7 - 3  # rows room; KV room is (32 - 6) * 4 - 4
    assert ids(inv.work_conserving(lean)) == {"work-conserving"}


def idle_run(fingerprints, events, outcomes=None):
    """Idle steps ('0' waits) with the given fingerprints."""
    steps = [good_record(step=i, num_scheduled_tokens={}, runner_rows={}, running=(), waiting=("0",),
                         progress_possible=False, fingerprint=fp) for i, fp in enumerate(fingerprints)]
    outs = outcomes or [StepOutcome(i, {}) for i in range(len(steps))]
    return run_of(steps, outs, events, {"0": state("waiting")})


def test_progress_reports_the_first_step_of_a_fixpoint_once_a_stretch():
    steps = [("step", i) for i in range(5)]
    run = idle_run([1, 2, 2, 2, 2], [("add", "0"), *steps])
    found = inv.progress.over_run(run)
    assert [(v.step, "changed nothing" in v.message) for v in found] == [(1, True)]
    assert "1 requests live: 0" in found[0].message
    again = idle_run([1, 1, 1, 1], [("add", "0"), ("step", 0), ("step", 1), ("add", "1"), ("step", 2), ("step", 3)])
    assert [step for step, _ in inv.first_fixpoint(again)] == [0, 2]  # an op starts a new stretch


def test_no_fixpoint_across_an_op_without_fingerprints_or_with_nothing_live():
    assert inv.first_fixpoint(idle_run([1, 1], [("add", "0"), ("step", 0), ("abort", "x"), ("step", 1)])) == []
    assert inv.first_fixpoint(idle_run([None, None], [("add", "0"), ("step", 0), ("step", 1)])) == []
    assert inv.first_fixpoint(idle_run([1, 1], [("add", "0"), ("abort", "0"), ("step", 0), ("step", 1)])) == []
    finished = [StepOutcome(0, {"0": state("finished", 1, 4)}), StepOutcome(1, {})]
    assert inv.first_fixpoint(idle_run([1, 1], [("add", "0"), ("step", 0), ("step", 1)], finished)) == []
    engine_aborted = [StepOutcome(0, {"0": state("aborted")}), StepOutcome(1, {})]
    assert inv.first_fixpoint(idle_run([1, 1], [("add", "0"), ("step", 0), ("step", 1)], engine_aborted)) == []


def test_ends_in_fixpoint_needs_two_steps_in_a_row_with_equal_fingerprints():
    assert inv.ends_in_fixpoint(idle_run([1, 2, 2], [("add", "0"), ("step", 0), ("step", 1), ("step", 2)]))
    assert not inv.ends_in_fixpoint(idle_run([1, 2], [("add", "0"), ("step", 0), ("step", 1)]))
    assert not inv.ends_in_fixpoint(idle_run([2, 2], [("add", "0"), ("step", 0), ("add", "1"), ("step", 1)]))
    assert not inv.ends_in_fixpoint(idle_run([None, None], [("add", "0"), ("step", 0), ("step", 1)]))
