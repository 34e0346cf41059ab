"""Loop variants: the prover's pass skeleton calls the same hooks and reads the same flags
as the loop, so a variant's pass is the same on both (as ``test_proofs_pass.py`` pins the
engine loops), and a variant changes what the loop does."""
from __future__ import annotations

import random

import pytest
from proof_budgets import Z3_TIMEOUT_S

from tokenbudget.model import BudgetConfig, VllmLoop, decisions, get_policy, ite, scheduler_for
from tokenbudget.model.vllm.policies import VllmAdaptive

from test_proofs_pass import add_random_request, assert_same, random_config, skeleton_pass

pytestmark = pytest.mark.proofs


class CursorNotMovedBack(VllmLoop):
    @classmethod
    def cursor_after_preemption(cls, index, victim_index):
        return index


class NoModelLenClip(VllmLoop):
    @classmethod
    def running_grant(cls, policy, p, budgets, demand, computed, threshold, max_model_len, bypass):
        wanted = decisions.capped_by_threshold(demand, threshold)
        return ite(bypass, wanted, policy.grant(p, wanted, budgets))


class HeadIsVictim(VllmLoop):
    @classmethod
    def victim(cls, priority_scheduling, running, priority, arrival):
        return [run and not any(running[:v]) for v, run in enumerate(running)]


class WaitingIgnoresExitRule(VllmLoop):
    waiting_checks_exit_rule = False


VARIANTS = (CursorNotMovedBack, NoModelLenClip, HeadIsVictim, WaitingIgnoresExitRule)


def on(loop: type) -> VllmAdaptive:
    policy = VllmAdaptive()
    policy.loop = loop
    return policy


@pytest.mark.parametrize("loop", VARIANTS, ids=lambda c: c.__name__)
def test_skeleton_pass_equals_the_variant(loop):
    rng = random.Random(loop.__name__)
    passes = 0
    while passes < 60:
        cfg = random_config(rng, "vllm-adaptive")
        if cfg is None:
            continue
        sched = scheduler_for(cfg, on(loop))
        for _ in range(rng.randint(1, 3)):
            add_random_request(rng, sched)
        for _ in range(rng.randint(1, 10)):
            add_random_request(rng, sched) if rng.random() < 0.5 else None
            result, pass_cfg, ids = skeleton_pass(sched)
            try:
                record = sched.schedule()
            except AssertionError:  # a buggy variant may crash the model: nothing to compare
                break
            assert_same(result, pass_cfg, ids, record)
            passes += 1
            try:
                sched.update_from_output(record, {rid: rng.randint(0, cfg.num_speculative_tokens)
                                                  for rid in record.num_scheduled_tokens})
            except AssertionError:
                break


def test_the_cursor_hook_skips_the_request_after_the_current_one():
    """Three 4-token prompts fill three of four KV blocks; their decodes each need a second
    block. Queue c, a, b: c takes the free block, a preempts c (the last arrival, standing
    before the cursor) and takes one of its two, b the other. A cursor not moved back skips
    b for the step (vLLM #49097)."""
    cfg = BudgetConfig(max_num_batched_tokens=64, max_num_seqs=4, block_size=4, num_kv_blocks=4, max_model_len=16,
                       scheduling_policy="priority")
    seen = {}
    for loop in (VllmLoop, CursorNotMovedBack):
        sched = scheduler_for(cfg, on(loop))
        for rid in ("a", "b", "c"):
            sched.add_request(rid, 4, 8)
        sched.update_from_output(sched.schedule())
        sched.running.insert(0, sched.running.pop())
        record = sched.schedule()
        seen[loop] = (record.num_scheduled_tokens, record.preempted)
    assert seen[VllmLoop] == ({"a": 1, "b": 1}, ("c",))
    assert seen[CursorNotMovedBack] == ({"a": 1}, ("c",))


def test_a_policy_names_its_variant():
    policy = get_policy("vllm-adaptive")
    assert policy.loop is VllmLoop and on(CursorNotMovedBack).loop is CursorNotMovedBack


def test_induction_follows_a_cursor_variant_and_declines_a_refund_that_stays_scheduled():
    from tokenbudget.proofs.induction import prove_by_induction

    class RefundKeepsVictimScheduled(VllmLoop):
        unschedules_refunded = False

    assert prove_by_induction(on(CursorNotMovedBack), timeout_s=Z3_TIMEOUT_S).proved["token-cap"]
    declined = prove_by_induction(on(RefundKeepsVictimScheduled), timeout_s=Z3_TIMEOUT_S)
    assert not declined.proved["token-cap"] and "unschedules_refunded" in declined.reasons["token-cap"]
