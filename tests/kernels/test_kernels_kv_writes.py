"""The model's physical KV need is what the torch runner writes (differential, CPU).

Per request and step, the model's record says which positions the step writes: its target
rows from ``computed`` on (``runner_rows - d``: the engine's rows, ``model.physical_need``)
and, when the request samples and the method drafts with a model, the drafter's L
positions from the new last token (``StepLimits.lookahead``). The runner reports the
positions it wrote (``StepExecution.kv_written``). They must be the same set; their end
never passes the need ``kv-capacity`` judges, and meets it when every scheduled draft is
accepted. On every corpus trace the runner executes and on seeded random traces.
"""
from __future__ import annotations

import random
from dataclasses import replace
from pathlib import Path
from typing import Mapping

import pytest

from tokenbudget.kernels.arrivals import extend
from tokenbudget.kernels.runner import StepExecution
from tokenbudget.kernels.target import RunnerOptions, RunnerTarget, runner_refusal
from tokenbudget.model import BudgetConfig, ConfigError, decisions, get_policy, methods
from tokenbudget.model.physical_need import physical_need
from tokenbudget.model.target import ModelTarget
from tokenbudget.model.vllm.policies import VllmAdaptive
from tokenbudget.spec import check_step, grant_rules
from tokenbudget.spec.corpus import corpus_paths
from tokenbudget.spec.execution import Execution
from tokenbudget.spec.records import StepRecord
from tokenbudget.spec.trace import AddOp, StepOp, Trace, load_trace

Step = tuple[StepRecord, Mapping[str, int], StepExecution]


def executed_steps(trace: Trace) -> list[Step] | None:
    """Every step the runner executed in forced mode, with the accepted drafts it was given;
    None when the runner or the policy refuses the config."""
    cfg, policy = BudgetConfig.from_dict(trace.config), get_policy(trace.policy)
    if runner_refusal(cfg, policy) is not None:
        return None
    try:
        target = RunnerTarget(cfg, policy, RunnerOptions())
    except ConfigError:
        return None
    steps: list[Step] = []
    execute = target.runner.execute

    def recording(record: StepRecord, forced: Mapping[str, int] | None = None) -> StepExecution:
        execution = execute(record, forced)
        steps.append((record, forced or {}, execution))
        return execution

    target.runner.execute = recording  # type: ignore[method-assign]
    run = Execution(target)
    for op in trace.ops:
        if run.crashed is not None:
            break
        run.apply(op)
    return steps


def model_writes(record: StepRecord, rid: str, accepted: Mapping[str, int], model_drafter: bool) -> set[int]:
    """The positions the model's physical need says the step writes for ``rid``."""
    lim = record.limits
    computed, grant, known = record.computed_before[rid], record.num_scheduled_tokens[rid], record.num_tokens[rid]
    out = set(range(computed, computed + record.runner_rows[rid] - lim.draft_slots))
    if model_drafter and computed + grant >= known:  # the step samples: the drafter writes from the new last token
        taken = decisions.accepted_drafts(rid in record.padded, accepted.get(rid, 0),
                                          record.scheduled_draft_tokens.get(rid, 0))
        last = known + taken
        out |= set(range(last, min(last + lim.lookahead, lim.max_model_len)))  # L from the new last token
    return out


def assert_writes_match(trace: Trace, steps: list[Step]) -> int:
    """The check of the module docstring on every executed step; returns how many requests'
    writes met the need exactly."""
    cfg = BudgetConfig.from_dict(trace.config)
    table = physical_need(get_policy(trace.policy), cfg).table
    model_drafter = methods.drafter(table, cfg.method) == methods.MODEL_DRAFTER
    exact = 0
    for record, accepted, execution in steps:
        assert set(execution.kv_written) == set(record.num_scheduled_tokens), record.step
        lim = record.limits
        for rid, written in execution.kv_written.items():
            expected = model_writes(record, rid, accepted, model_drafter)
            assert set(written) == expected, (trace.policy, record.step, rid, sorted(expected), written)
            target_rows = record.runner_rows[rid] - lim.draft_slots
            need = grant_rules.kv_slots_needed(record.computed_before[rid], target_rows, lim.lookahead,
                                               lim.max_model_len)
            assert written[-1] < need, (record.step, rid, written[-1], need)
            drafts = record.scheduled_draft_tokens.get(rid, 0)
            sampled = record.computed_before[rid] + record.num_scheduled_tokens[rid] >= record.num_tokens[rid]
            if model_drafter and sampled and rid not in record.padded and accepted.get(rid, 0) >= drafts:
                assert written[-1] + 1 == need, (record.step, rid, written[-1], need)
                exact += 1
    return exact


def _runner_corpus() -> list[Path]:
    """The corpus traces the runner executes (``runner_refusal``)."""
    traces = {p: load_trace(p) for p in corpus_paths()}
    return [p for p, t in traces.items()
            if runner_refusal(BudgetConfig.from_dict(t.config), get_policy(t.policy)) is None]


@pytest.mark.parametrize("path", _runner_corpus(), ids=lambda p: p.stem)
def test_the_runner_writes_the_kv_the_model_says_on_the_corpus(path: Path) -> None:
    trace = load_trace(path)
    steps = executed_steps(trace)
    if steps is None:  # a trace whose config the policy refuses
        return
    assert_writes_match(trace, steps)


# Seeded random traces: a config per engine and drafting method, requests arriving at random
# and each step accepting a random share of the drafts (all of them at times).
CONFIGS = (
    ("vllm-adaptive", {"method": "eagle3"}),
    ("vllm-adaptive", {"method": "mtp", "parallel_drafting": True}),
    ("vllm-adaptive", {"method": "dflash", "parallel_drafting": True, "engine_version": "0.32"}),
    ("vllm-adaptive", {"method": "dflash", "parallel_drafting": True, "engine_version": "0.33"}),
    ("vllm-adaptive", {"method": "dspark", "parallel_drafting": True}),
    ("vllm-adaptive", {"method": "draft_model"}),
    ("vllm-adaptive", {"method": "ngram"}),
    ("vllm-adaptive", {}),
    ("fastdeploy-spec-method", {"method": "mtp"}),
    ("fastdeploy-spec-method", {"method": "ngram"}),
    ("trtllm", {"method": "mtp"}),
    ("trtllm", {"method": "eagle3"}),
    ("trtllm", {"method": "draft_model"}),
    ("trtllm", {"method": "ngram"}),
)
SEEDS = (0, 1, 2)
BASE = {"max_num_batched_tokens": 64, "max_num_seqs": 4, "block_size": 8, "num_kv_blocks": 40, "max_model_len": 96}


def random_trace(policy: str, knobs: dict[str, object], seed: int) -> Trace:
    rng = random.Random(f"{policy} {sorted(knobs.items())} {seed}")
    k = rng.randint(1, 4) if knobs.get("method") else 0
    config = {**BASE, **knobs, "num_speculative_tokens": k}
    trace = extend(Trace(policy=policy, config=config, ops=()), 30, seed)
    added: list[str] = []
    ops = []
    for op in trace.ops:
        if isinstance(op, AddOp):
            added.append(op.id)
        elif isinstance(op, StepOp):
            op = StepOp({rid: rng.choice((0, rng.randint(0, k), k, k)) for rid in added})
        ops.append(op)
    return replace(trace, ops=tuple(ops))


def _label(value: object) -> str:
    return value if isinstance(value, str) else "-".join(map(str, value.values()))  # type: ignore[attr-defined]


@pytest.mark.parametrize("policy,knobs", CONFIGS, ids=_label)
def test_the_runner_writes_the_kv_the_model_says_on_random_traces(policy: str, knobs: dict[str, object]) -> None:
    exact = 0
    for seed in SEEDS:
        trace = random_trace(policy, knobs, seed)
        steps = executed_steps(trace)
        assert steps, (policy, knobs, seed)
        exact += assert_writes_match(trace, steps)
    assert exact > 0 or knobs.get("method") in (None, "ngram")  # a fully accepted step met the need exactly


class EagleWithoutLookahead(VllmAdaptive):
    """vLLM before PR #16370: no lookahead KV reserved for the EAGLE head's drafts."""

    name = "eagle-without-lookahead"

    def lookahead(self, cfg: BudgetConfig) -> int:
        return 0


def test_a_policy_reserving_too_little_overflows_the_runner_where_kv_capacity_says() -> None:
    """The need is the engine's, not the policy's: the policy's reservation runs short on the
    runner at the very step the model reports kv-capacity, naming the drafter's lookahead."""
    trace = load_trace(next(p for p in corpus_paths() if p.stem == "vllm-adaptive-eagle-hit-drops-last-block"))
    cfg, policy = BudgetConfig.from_dict(trace.config), EagleWithoutLookahead()
    model = Execution(ModelTarget(cfg, policy))
    runner = Execution(RunnerTarget(cfg, policy, RunnerOptions()))
    for op in trace.ops:
        model.apply(op)
        if runner.crashed is None:
            runner.apply(op)
    short = [v for rec in model.run.steps for v in check_step(rec) if v.invariant == "kv-capacity"]
    assert short and "eagle3 drafter writes to" in short[0].message and "+ drafter " in short[0].message
    assert runner.crashed is not None and runner.crashed.error is not None
    assert runner.crashed.step == short[0].step and "KVOverflow" in runner.crashed.error
