"""The importable vLLM's scheduler (0.32 here) as a target: records, target errors, replay and the CLI.
A trace or a model built for another vLLM version is compared with that version elsewhere
(tests/vllm/test_both_vllm_versions.py runs 0.33 through ``--engine-path``)."""
from __future__ import annotations

import json

import pytest
from vllm_support import F1_TRACE, F2_TRACE

from tokenbudget.cli import main
from tokenbudget.spec.corpus import corpus_paths
from tokenbudget.spec.execution import Execution
from tokenbudget.model.target import ModelTarget
from tokenbudget.harness.vllm.async_runner import SYNC_ENV
from tokenbudget.harness.vllm.speculative import TranslationRefused
from tokenbudget.harness.vllm.engine import engine_version
from tokenbudget.harness.vllm.target import VllmTarget
from tokenbudget.model import BudgetConfig, ConfigError, get_policy
from tokenbudget.model.methods import VLLM_0_32
from tokenbudget.model.replay import replay_on_model
from tokenbudget.spec import check_run
from tokenbudget.spec.trace import AddOp, StepOp, load_trace

pytestmark = [pytest.mark.vllm, pytest.mark.usefixtures("vllm_imported")]

ADAPTIVE = get_policy("vllm-adaptive")
VLLM_CORPUS = [p for p in corpus_paths(findings=False) if load_trace(p).policy == "vllm-adaptive"]


def test_seed_000_replays_on_vllm_with_10_and_4() -> None:
    seed = next(p for p in VLLM_CORPUS if p.stem == "seed-000-vllm-adaptive")
    result = replay_on_model(load_trace(seed), target_factory=VllmTarget)
    assert result.ok and not result.violations and not result.errors
    assert dict(result.steps[0].num_scheduled_tokens) == {"0": 10, "1": 4}


@pytest.mark.parametrize("path", VLLM_CORPUS, ids=lambda p: p.stem)
def test_every_vllm_adaptive_corpus_trace_meets_its_expectations_on_vllm(path, monkeypatch) -> None:
    monkeypatch.setenv(SYNC_ENV, "1")  # the corpus's expectations are the synchronous loop's step by step
    trace, driven = load_trace(path), engine_version()
    written_for = trace.config.get("engine_version")
    if written_for not in (None, driven.model_version):
        pytest.skip(f"the trace's expectations are vLLM {written_for}'s and this process drives vLLM {driven.release}; "
                    "test_both_vllm_versions.py replays it on its version")
    result = replay_on_model(trace, target_factory=VllmTarget)
    assert result.ok, "; ".join(result.problems)


def test_an_exception_inside_vllm_is_a_target_error_not_a_crash() -> None:
    trace = load_trace(F1_TRACE)
    on_vllm = replay_on_model(trace, target_factory=VllmTarget)
    assert len(on_vllm.steps) == 2  # the run stops at the step that raised
    assert on_vllm.errors and "AssertionError" in on_vllm.errors[0] and "scheduler.py:1372" in on_vllm.errors[0]
    assert not on_vllm.ok
    on_model = replay_on_model(trace)  # the model flags the same step as a spec-shape violation
    assert on_model.ok and not on_model.errors and {v.invariant for v in on_model.violations} == {"spec-shape"}


def test_finding_f2_hangs_vllm_as_the_model_predicts() -> None:
    trace = load_trace(F2_TRACE)
    for result in (replay_on_model(trace, target_factory=VllmTarget), replay_on_model(trace)):
        assert result.ok and all(not s.num_scheduled_tokens for s in result.steps)


@pytest.mark.parametrize("method", sorted(VLLM_0_32))
@pytest.mark.parametrize("parallel", [False, True])
def test_limits_read_from_vllm_match_the_method_table(method: str, parallel: bool) -> None:
    cfg = BudgetConfig(max_num_batched_tokens=64, max_num_seqs=4, num_speculative_tokens=3, method=method,
                       parallel_drafting=parallel, max_model_len=64, num_kv_blocks=16)
    on_vllm = VllmTarget(cfg, ADAPTIVE)  # the model follows the newest version unless told the one vLLM runs
    assert on_vllm.limits == ModelTarget(cfg.replace(engine_version=on_vllm.version.model_version), ADAPTIVE).limits


def test_records_carry_what_vllm_exposes_and_leave_the_ledger_out() -> None:
    """progress_possible is read from the live state (observe.progress_possible); the ledger and demand are not."""
    cfg = BudgetConfig(max_num_batched_tokens=32, max_num_seqs=4, num_speculative_tokens=2, method="ngram",
                       parallel_drafting=True, block_size=4, num_kv_blocks=12, max_model_len=32)
    run = Execution(VllmTarget(cfg, ADAPTIVE))
    for op in (AddOp("a", 9, 6, prefix_group="g", prefix_len=8), AddOp("b", 9, 6, prefix_group="g", prefix_len=8)):
        run.apply(op)
    records = [run.apply(StepOp({"a": 1, "b": 2})) for _ in range(8)]
    first = records[0]
    assert first is not None and first.num_scheduled_tokens == {"a": 9, "b": 1 + 2}  # b hits a's block, padded
    assert first.padded == {"b"} and first.scheduled_draft_tokens == {"a": 0, "b": 2}
    assert first.runner_rows == {"a": 9 + 1, "b": 3 + 1} and first.computed_before == {"a": 0, "b": 8}
    assert first.block_tables["a"][0] == first.block_tables["b"][0] and first.block_keys  # one shared block
    assert first.ledger is None and first.progress_possible is True and first.unserved_demand is None
    assert check_run(run.run) == []


def test_the_vllm_target_refuses_other_policies_and_configs_vllm_refuses() -> None:
    cfg = BudgetConfig(max_num_batched_tokens=8, max_num_seqs=16, max_model_len=64, num_kv_blocks=8)
    with pytest.raises(ConfigError, match="whose accounting is vllm-adaptive or vllm-static's"):
        VllmTarget(cfg, get_policy("fastdeploy-v0"))
    with pytest.raises(TranslationRefused, match="refuses tokenbudget's translation of this config"):
        VllmTarget(cfg, ADAPTIVE, validate=False)  # B < S: the model's validation skipped, vLLM's refuses


def test_cli_replays_on_vllm(capsys: pytest.CaptureFixture[str]) -> None:
    seed = next(p for p in VLLM_CORPUS if p.stem == "seed-000-vllm-adaptive")
    assert main(["replay", "--target", "vllm", "--json", str(seed)]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["target"] == "vllm" and doc["traces"][0]["steps"][0]["num_scheduled_tokens"] == {"0": 10, "1": 4}
    assert main(["replay", "--target", "vllm", str(F1_TRACE)]) == 1
    assert "target error in step 1: AssertionError" in capsys.readouterr().out
    assert main(["replay", "--target", "vllm", "--mode", "live", str(seed)]) == 2


def test_vllms_state_fingerprint_shows_f2s_hang_as_a_fixpoint_at_step_0() -> None:
    """The harness fingerprints vLLM's scheduler state; F2's stall leaves it unchanged from
    step 0, and the model (whose fingerprint is its own) reports the same step."""
    trace = load_trace(F2_TRACE)
    for result in (replay_on_model(trace, target_factory=VllmTarget), replay_on_model(trace)):
        fixpoints = [v for v in result.violations if v.invariant == "progress" and "changed nothing" in v.message]
        assert [v.step for v in fixpoints] == [0]
    working = replay_on_model(load_trace(next(p for p in VLLM_CORPUS if p.stem == "seed-000-vllm-adaptive")),
                              target_factory=VllmTarget)
    fingerprints = [rec.fingerprint for rec in working.run.steps]
    assert None not in fingerprints and len(set(map(repr, fingerprints))) > 1
    assert not [v for v in working.violations if "changed nothing" in v.message]


@pytest.mark.parametrize("method", ["eagle3", "ngram", "dflash"])
def test_the_physical_draft_slots_and_lookahead_are_the_method_tables_not_vllms(method: str) -> None:
    """d and L judge vLLM, so they cannot come from it: a slip in vLLM's draft-slot count would
    hide in its own numbers. vLLM's lookahead is what it reserves."""
    from tokenbudget.model.physical_need import physical_need

    cfg = BudgetConfig(max_num_batched_tokens=64, max_num_seqs=4, num_speculative_tokens=3, method=method,
                       parallel_drafting=True, block_size=4, num_kv_blocks=32, max_model_len=64)
    target = VllmTarget(cfg, ADAPTIVE)
    need = physical_need(ADAPTIVE, cfg.replace(engine_version=target.version.model_version))
    assert (target.limits.draft_slots, target.limits.lookahead) == (need.draft_slots, need.lookahead)
    assert target.limits.reserved_lookahead == target.engine.scheduler.num_lookahead_tokens
    assert target.engine.limits is target.limits  # the records the engine builds carry them


def test_vllm_static_runs_vllm_with_its_token_budget_set_up_front_and_agrees_with_the_model() -> None:
    from tokenbudget.harness.vllm.differential import DifferentialTarget
    static = get_policy("vllm-static")
    cfg = BudgetConfig(max_num_batched_tokens=64, max_num_seqs=4, max_model_len=128, num_kv_blocks=64,
                       num_speculative_tokens=2, method="draft_model")  # d = 1: T = 64 - 4 = 60
    target = DifferentialTarget(cfg, static)
    assert target.engine.limits.max_num_scheduled_tokens == 60
    run = Execution(target)
    for i in range(5):
        run.apply(AddOp(str(i), 30 + i, 6))
    for _ in range(12):
        run.apply(StepOp({}))
    assert run.run.steps[0].total_scheduled_tokens == 60 and not target.judged and not target.parted

