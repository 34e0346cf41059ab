"""The physical need is the engine's: a policy or a loop variant that overrides what it says
it reserves, charges or reads leaves the need, the record's limits and rows as they were."""
from __future__ import annotations

import pytest

from tokenbudget.model import BudgetConfig, FastDeployLoop, VllmLoop, methods, scheduler_for
from tokenbudget.model.config import ConfigError
from tokenbudget.model.fastdeploy.policies import FastDeploySpecMethod
from tokenbudget.model.physical_need import builtin_class, physical_need
from tokenbudget.model.policy import BudgetPolicy
from tokenbudget.model.target import ModelTarget
from tokenbudget.model.trtllm.policies import Trtllm
from tokenbudget.model.vllm.policies import VllmAdaptive, VllmStatic
from tokenbudget.spec import check_step
from tokenbudget.spec.execution import Execution
from tokenbudget.spec.trace import AddOp, StepOp

EAGLE = BudgetConfig(max_num_batched_tokens=64, max_num_seqs=4, num_speculative_tokens=3, method="eagle3",
                     block_size=4, num_kv_blocks=64, max_model_len=128)


class Lying(VllmAdaptive):
    """Says it needs nothing: no lookahead, no draft slots, a foreign table, one row a request."""

    name = "lying"
    table = "sglang"

    def lookahead(self, cfg):
        return 0

    def table_for(self, cfg):
        return "sglang"

    def runner_rows(self, p, grant, is_decode):
        return 1

    class loop(VllmLoop):  # noqa: N801 (the policy's ``loop``)
        @classmethod
        def method_table(cls, version):
            return "sglang"


def test_a_policy_cannot_redefine_what_a_step_needs() -> None:
    honest, lying = physical_need(VllmAdaptive(), EAGLE), physical_need(Lying(), EAGLE)
    assert lying == honest
    assert (honest.table, honest.lookahead, honest.draft_slots) == ("vllm-0.33", 2, 0)  # EAGLE3 writes k - 1
    sched = scheduler_for(EAGLE, Lying(), validate=False)
    assert (sched.lookahead, sched.limits.lookahead, sched.limits.reserved_lookahead) == (0, 2, 0)


def test_eagle_writes_one_kv_slot_less_than_vllm_reserves() -> None:
    """vLLM's EAGLE-family proposer writes k - 1 past the target rows (llm_base_proposer.py:689);
    ``num_lookahead_tokens`` reserves k; a draft model and DFlash write what they reserve."""
    for method, reserved, writes in (("eagle3", 3, 2), ("mtp", 3, 2), ("draft_model", 3, 3), ("dflash", 4, 4)):
        cfg = BudgetConfig(**{**EAGLE.__dict__, "method": method, "parallel_drafting": method == "dflash"})
        sched = scheduler_for(cfg, VllmAdaptive())
        assert (sched.limits.reserved_lookahead, sched.limits.lookahead) == (reserved, writes), method


def test_the_vllm_table_follows_the_version() -> None:
    dflash = BudgetConfig(**{**EAGLE.__dict__, "method": "dflash", "parallel_drafting": True})
    for version, d in (("0.32", 3), ("0.33", 0)):
        cfg = BudgetConfig(**{**dflash.__dict__, "engine_version": version})
        need = physical_need(VllmAdaptive(), cfg)
        assert (need.table, need.lookahead, need.draft_slots) == (f"vllm-{version}", 4, d)
    assert physical_need(VllmStatic(), dflash).table == "vllm-0.32"  # it models 0.32 only


@pytest.mark.parametrize("policy, writes", [(FastDeploySpecMethod(), 0), (Trtllm(), 3)], ids=["fastdeploy", "trtllm"])
def test_a_decode_runs_its_rows_whatever_it_was_granted(policy: BudgetPolicy, writes: int) -> None:
    cfg = BudgetConfig(max_num_batched_tokens=64, max_num_seqs=4, num_speculative_tokens=3, method="mtp",
                       block_size=4, num_kv_blocks=64, max_model_len=128)
    need = physical_need(policy, cfg)
    assert (need.runner_rows(1, True), need.runner_rows(5, False)) == (4, 5)
    # target rows, then the MTP drafter's L: FastDeploy's num_model_steps - 1 substeps past them, none at its default 1
    assert need.kv_slots(10, need.target_rows(1, True), 128) == 10 + 4 + writes


def test_an_ngram_drafter_writes_no_kv() -> None:
    cfg = BudgetConfig(max_num_batched_tokens=64, max_num_seqs=4, num_speculative_tokens=3, method="ngram",
                       block_size=4, num_kv_blocks=64, max_model_len=128)
    policy = FastDeploySpecMethod()
    assert policy.lookahead(cfg) == 3  # FastDeploy's table reserves k: the scheduler's reservation
    assert physical_need(policy, cfg).lookahead == 0


def test_the_engine_is_the_nearest_loop_the_model_defines() -> None:
    assert builtin_class(Lying.loop) is VllmLoop
    assert builtin_class(FastDeployLoop) is FastDeployLoop


def test_a_method_the_engine_does_not_run_is_a_config_error() -> None:
    class NoEngine(BudgetPolicy):
        name = "no-engine"
        loop = FastDeployLoop

    with pytest.raises(ConfigError, match="not in the fastdeploy method table"):
        physical_need(NoEngine(), EAGLE)
    assert "eagle3" not in methods.TABLES["fastdeploy"]


class ReservesLess(VllmAdaptive):
    """Reserves ``short`` slots fewer than vLLM's k past each grant."""

    short = 1

    def lookahead(self, cfg):
        return cfg.num_speculative_tokens - self.short


@pytest.mark.parametrize("short, violated", [(1, False), (2, True)])
def test_reserving_what_eagle_writes_is_enough_and_less_is_not(short: int, violated: bool) -> None:
    """Decodes at block size 1 with every draft accepted: the request's blocks end where the
    reservation does, so one slot short of what the drafter writes (k - 1) shows at once."""
    cfg = BudgetConfig(**{**EAGLE.__dict__, "block_size": 1, "num_kv_blocks": 512, "engine_version": "0.32"})
    policy = type("ReservesLess", (ReservesLess,), {"short": short, "name": f"reserves-k-minus-{short}"})()
    run = Execution(ModelTarget(cfg, policy))
    run.apply(AddOp("r0", prompt_len=5, max_tokens=40))
    kv = []
    for _ in range(8):
        record = run.apply(StepOp({"r0": 3}))
        kv += [v for v in check_step(record) if v.invariant == "kv-capacity"]
    assert bool(kv) == violated, [v.message for v in kv]
