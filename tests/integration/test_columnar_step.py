"""The columnar step (``tokenbudget/model/vllm/columnar.py``) against the scalar step, and the columnar checks
(``tokenbudget/spec/columnar_checks.py``) against ``check_step``: on seeded workloads, every record and every
outcome of the one is equal to the other's, and every record is judged alike."""
from __future__ import annotations

import random
from dataclasses import replace

import pytest

from tokenbudget.model import BudgetConfig, decisions, get_policy, scheduler_for
from tokenbudget.model.vllm import columnar as columnar_vllm
from tokenbudget.spec import LedgerEntry, check_step
from tokenbudget.spec import columnar_checks
from tokenbudget.spec.columnar_checks import check_step_columnar

CONFIGS = [
    {},  # no speculation
    {"num_speculative_tokens": 4, "method": "ngram", "parallel_drafting": True},
    {"num_speculative_tokens": 3, "method": "eagle3", "block_size": 4},
    {"num_speculative_tokens": 2, "method": "mtp", "engine_version": "0.32",
     "long_prefill_token_threshold": 24},
    {"num_speculative_tokens": 2, "method": "draft_model", "max_num_scheduled_tokens": 300},
    {"num_speculative_tokens": 4, "method": "dflash", "max_model_len": 160, "block_size": 8},
    # a small pool: preemptions, which the columnar step leaves to the scalar one
    {"num_speculative_tokens": 3, "method": "eagle3", "scheduling_policy": "priority", "num_kv_blocks": 90,
     "block_size": 4, "max_model_len": 256},
    {"num_speculative_tokens": 2, "method": "ngram", "enable_prefix_caching": False, "enable_chunked_prefill": False,
     "max_model_len": 512},
    {"num_speculative_tokens": 1, "method": "dspark", "max_num_seqs": 24, "max_num_batched_tokens": 400},
    {"num_speculative_tokens": 3, "method": "eagle3", "engine_version": "0.32", "max_num_seqs": 40,
     "max_num_batched_tokens": 600, "long_prefill_token_threshold": 16},  # full batches, budgets cut each step
]
POLICIES = ("vllm-adaptive", "vllm-static")


def workload(rng: random.Random, cfg: dict) -> list[tuple]:
    """Adds (some sharing a prefix, some with a priority), then steps with random acceptance,
    with a few adds and aborts between them."""
    max_len = cfg.get("max_model_len", 8192)
    ids: list[str] = []
    ops: list[tuple] = []

    def add() -> None:
        rid = str(len(ids))
        ids.append(rid)
        prompt = rng.randint(1, min(120, max_len - 1))
        group = rng.choice([None, "a", "b"])
        ops.append(("add", rid, prompt, rng.randint(1, 40), rng.randint(0, 3), group,
                    rng.randint(0, prompt) if group else 0))

    for _ in range(rng.randint(5, 60)):
        add()
    k = cfg.get("num_speculative_tokens", 0)
    for _ in range(rng.randint(20, 70)):
        roll = rng.random()
        if roll < 0.05:
            add()
        elif roll < 0.08:
            ops.append(("abort", rng.choice(ids)))
        else:
            ops.append(("step", {rid: rng.randint(0, k) for rid in ids if rng.random() < 0.8}))
    return ops


def run(policy: str, cfg: dict, ops: list[tuple], floor: int | None) -> tuple[list, list, int]:
    """The records and outcomes of ``ops``, the columnar step taken from ``floor`` running
    requests on (None: never), and how many steps took it."""
    sched = scheduler_for(BudgetConfig.from_dict(cfg), get_policy(policy))
    sched.columnar_min_running = floor
    records, outcomes, columnar = [], [], 0
    for op in ops:
        if op[0] == "add":
            sched.add_request(*op[1:])
        elif op[0] == "abort":
            sched.abort_request(op[1])
        else:
            record = sched.schedule()
            columnar += sched.columnar_memo.last is not None
            records.append(record)
            outcomes.append(sched.update_from_output(record, dict(op[1])))
    return records, outcomes, columnar


def cases() -> list[tuple[str, dict, int]]:
    """Three seeds of each config under each policy."""
    return [(policy, cfg, seed) for policy in POLICIES for i, cfg in enumerate(CONFIGS)
            for seed in range(3 * i, 3 * i + 3)]


@pytest.mark.parametrize("policy,cfg,seed", cases())
def test_every_record_and_outcome_equal_the_scalar_step(policy: str, cfg: dict, seed: int) -> None:
    ops = workload(random.Random(seed), cfg)
    scalar, scalar_outcomes, none = run(policy, cfg, ops, None)
    columnar, columnar_outcomes, taken = run(policy, cfg, ops, 1)
    assert none == 0
    assert len(columnar) == len(scalar)
    for index, (a, b) in enumerate(zip(scalar, columnar)):
        assert b == a, f"step {index}: the columnar record differs"
        assert b.waiting == a.waiting and b.ledger == a.ledger and b.block_tables == a.block_tables
    assert columnar_outcomes == scalar_outcomes
    assert taken > 0 or not any(r.running for r in scalar)


def test_a_pass_that_preempts_runs_scalar() -> None:
    """The small pool's workloads preempt; those steps ran scalar, the others columnar."""
    preempting = CONFIGS[6]
    records, _, taken = run("vllm-adaptive", preempting, workload(random.Random(18), preempting), 1)
    assert any(r.preempted for r in records) and 0 < taken < len(records)


def test_the_bench_workload_goes_columnar_at_the_default_floor() -> None:
    """A full batch of 256 takes the columnar step unasked, with the scalar step's records."""
    cfg = {"num_speculative_tokens": 4, "method": "ngram", "parallel_drafting": True}
    rng = random.Random(7)
    ops: list[tuple] = [("add", str(i), rng.randint(50, 400), rng.randint(20, 60), 0, None, 0) for i in range(300)]
    ops += [("step", {str(i): rng.randint(0, 4) for i in range(300)}) for _ in range(15)]
    scalar, scalar_outcomes, _ = run("vllm-adaptive", cfg, ops, None)
    columnar, columnar_outcomes, taken = run("vllm-adaptive", cfg, ops, columnar_vllm.MIN_RUNNING)
    assert taken >= 10
    assert columnar == scalar and columnar_outcomes == scalar_outcomes


def test_a_planted_decision_sends_the_step_scalar(monkeypatch: pytest.MonkeyPatch) -> None:
    """A replaced decision function (a planted bug) is one the columnar step does not reproduce:
    the step runs scalar, so the bug is seen."""
    cfg = {"num_speculative_tokens": 4, "method": "ngram", "parallel_drafting": True}
    ops = workload(random.Random(3), cfg)
    original = decisions.scheduled_drafts
    monkeypatch.setattr(decisions, "scheduled_drafts", lambda *a: original(*a) + 1)
    _, _, taken = run("vllm-adaptive", cfg, ops, 1)
    assert taken == 0


def broken(record):
    """Copies of ``record`` each breaking one invariant the columnar checks screen."""
    rid = next(iter(record.num_scheduled_tokens), None)
    if rid is None:
        return []
    out = [
        replace(record, num_scheduled_tokens={**record.num_scheduled_tokens, rid: 10**6}),
        replace(record, scheduled_draft_tokens={**record.scheduled_draft_tokens, rid: 99}),
        replace(record, prefill=record.prefill | {rid}, scheduled_draft_tokens={**record.scheduled_draft_tokens,
                                                                               rid: 1}),
        replace(record, computed_before={**record.computed_before, rid: record.limits.max_model_len}),
        replace(record, block_tables={**record.block_tables, rid: ()}),
        replace(record, kv_blocks_in_use=record.limits.num_kv_blocks + 1),
        replace(record, padded=record.padded | {rid}),
        replace(record, runner_rows={k: v for k, v in record.runner_rows.items() if k != rid}),
    ]
    lim = record.limits
    for rid, grant in record.num_scheduled_tokens.items():  # one block short of the need, where one is
        need = min(record.computed_before[rid] + record.runner_rows[rid] - lim.draft_slots + lim.lookahead,
                   lim.max_model_len)
        table = record.block_tables[rid]
        if (len(table) - 1) * lim.block_size < need:
            out.append(replace(record, block_tables={**record.block_tables, rid: table[:-1]}))
            break
    tables = list(record.block_tables.items())
    if len(tables) > 1 and tables[0][1] and tables[1][1]:
        out.append(replace(record, block_tables={**record.block_tables,
                                                 tables[1][0]: (tables[0][1][0],) + tables[1][1][1:]}))
    if record.ledger:
        first = record.ledger[0]
        out.append(replace(record, ledger=(first._replace(token_after=first.token_after - 1),) + record.ledger[1:]))
        out.append(replace(record, ledger=record.ledger + (LedgerEntry("refund", rid, 1, first.token_before,
                                                                       first.token_before + 1, None, None),)))
        if first.input_after is not None:
            out.append(replace(record, ledger=(first._replace(input_after=-1),) + record.ledger[1:]))
    return out


def test_the_columnar_checks_judge_every_record_as_check_step(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every record of the workloads and its broken copies, screened whatever its size."""
    monkeypatch.setattr(columnar_checks, "MIN_GRANTS", 0)
    judged = breaches = 0
    for policy, cfg, seed in cases()[::3]:
        records, _, _ = run(policy, cfg, workload(random.Random(seed), cfg), 1)
        for record in records:
            for rec in [record, *broken(record)]:
                expected = check_step(rec)
                assert check_step_columnar(rec) == expected, rec.step
                judged += 1
                breaches += bool(expected)
    assert breaches > judged // 3


def test_a_run_is_judged_as_check_run_judges_it(monkeypatch: pytest.MonkeyPatch) -> None:
    """``check_run_columnar`` (what a replay judges by) gives ``check_run``'s violations, on runs
    that break invariants (the small pool of a validation bypassed) and on clean ones."""
    from tokenbudget.model.target import ModelTarget
    from tokenbudget.spec import check_run
    from tokenbudget.spec.columnar_checks import check_run_columnar
    from tokenbudget.spec.execution import Execution
    from tokenbudget.spec.trace import AbortOp, AddOp, StepOp

    monkeypatch.setattr(columnar_checks, "MIN_GRANTS", 0)
    found = 0
    for policy, cfg, seed in cases()[::5]:
        bad = {**cfg, "max_num_batched_tokens": 3} if seed % 2 else cfg  # B below d: refused, run unvalidated
        target = ModelTarget(BudgetConfig.from_dict(bad), get_policy(policy), validate=False)
        execution = Execution(target)
        for op in workload(random.Random(seed), cfg):
            trace_op = (AddOp(op[1], op[2], op[3], priority=op[4], prefix_group=op[5], prefix_len=op[6])
                        if op[0] == "add" else AbortOp(op[1]) if op[0] == "abort" else StepOp(op[1]))
            if execution.crashed is not None:
                break
            try:
                execution.apply(trace_op)
            except ValueError:
                continue
        expected = check_run(execution.run)
        assert check_run_columnar(execution.run) == expected
        found += bool(expected)
    assert found


def test_a_replaced_policy_method_sends_the_step_scalar(monkeypatch: pytest.MonkeyPatch) -> None:
    """A built-in policy whose method was replaced, even by another model class's, runs scalar."""
    from tokenbudget.model.fastdeploy.policies import FastDeployV0
    from tokenbudget.model.vllm.policies import VllmAdaptive

    cfg = {"num_speculative_tokens": 4, "method": "ngram", "parallel_drafting": True}
    ops = workload(random.Random(4), cfg)
    assert run("vllm-adaptive", cfg, ops, 1)[2] > 0
    monkeypatch.setattr(VllmAdaptive, "charge", FastDeployV0.charge)
    assert run("vllm-adaptive", cfg, ops, 1)[2] == 0
