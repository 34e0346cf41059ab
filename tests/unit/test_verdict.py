"""How violations are judged (``tokenbudget.verdict``, over ``model.base_gap``): every
obligation, known only by a finding's matcher, a built-in's own record or (config
obligations) the base on the same trace, and efficiency against the base."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

from tokenbudget.model import ConfigError, get_policy
from tokenbudget.model.base_gap import base_policy, exceeds, gap_against_base
from tokenbudget.proofs.verdicts import PROVED, REFUTED, Outcome
from tokenbudget.verdict import KNOWN, MANIFEST_REFUTED, OWN, Judge, base_shows, failed, judge, recorded_violations
from tokenbudget.spec.corpus import FINDINGS_DIR, load_corpus
from tokenbudget.spec.trace import load_trace

sys.path.insert(0, str(Path(__file__).parent))  # verdict_policies, for --policy
COPY, THROTTLED = "verdict_policies:CopyAdaptive", "verdict_policies:ThrottledPrefill"
SEED = next(t for t in load_corpus(findings=False) if t.source.endswith("seed-000-vllm-adaptive.json"))


def finding_trace(name: str):  # type: ignore[no-untyped-def]
    return load_trace(FINDINGS_DIR / name)


def test_the_base_is_the_nearest_builtin_in_the_mro() -> None:
    assert base_policy(get_policy(COPY)) == "vllm-adaptive"
    assert base_policy(get_policy("verdict_policies:CopySpecMethod")) == "fastdeploy-spec-method"
    assert base_policy(get_policy("vllm-static")) == "vllm-static"


def test_an_obligation_that_is_no_invariant_is_not_judged_and_efficiency_only_against_the_base() -> None:
    assert Judge(COPY).of_refutation("no-fewer-tokens-than-static", (SEED,), "prove") is None
    assert Judge(COPY).of_refutation("work-conserving", (SEED,), "prove") is None  # the same gap as its base
    assert Judge(COPY).of_refutation("progress", (SEED,), "prove").kind == OWN  # type: ignore[union-attr]


def test_the_exit_rule_fails_own_violations_and_known_ones_only_under_strict() -> None:
    f1 = finding_trace("f1-vllm-adaptive-padded-threshold.json")
    known = Judge(COPY).of_violation("spec-shape", f1, "f1")
    own = Judge(THROTTLED).of_violation("progress", SEED, "seed")
    assert known.kind == KNOWN and own.kind == OWN
    assert not failed([known], strict=False) and failed([known], strict=True) and failed([own, known], strict=False)


def test_a_builtins_own_record_is_its_corpus_and_manifest_read_without_the_prover() -> None:
    assert MANIFEST_REFUTED == REFUTED
    assert "input-rows-cap" in recorded_violations("fastdeploy-v0")  # a corpus trace expects it, the manifest refutes it
    assert recorded_violations(COPY) == frozenset()
    overflow = next(t for t in load_corpus(findings=False) if t.source.endswith("fastdeploy-v0-rows-overflow.json"))
    assert Judge("fastdeploy-v0").known_why("input-rows-cap", overflow) == "fastdeploy-v0's own record"


def test_a_finding_explains_a_violation_only_by_its_matcher() -> None:
    f1 = finding_trace("f1-vllm-adaptive-padded-threshold.json")
    assert "F1" in (Judge(COPY).known_why("spec-shape", f1) or "")
    # the same engine and a progress violation, but no finding's mechanism in this run: the policy's own
    assert Judge(THROTTLED).known_why("progress", SEED) is None


def test_a_copy_of_a_known_bad_builtin_owns_its_run_violations() -> None:
    overflow = next(t for t in load_corpus(findings=False) if t.source.endswith("fastdeploy-v0-rows-overflow.json"))
    assert base_shows(overflow, "input-rows-cap", "fastdeploy-v0")  # the base shows it on the same trace ...
    assert Judge("verdict_policies:CopyV0").known_why("input-rows-cap", overflow) is None  # ... yet the copy's own
    assert not base_shows(SEED, "token-cap", "vllm-adaptive")


def test_config_complete_is_inherited_when_the_base_refuses_the_config_too() -> None:
    refused = next(t for t in load_corpus(findings=False) if t.source.endswith("seed-000-vllm-static-refused.json"))
    assert base_shows(refused, "config-complete", "vllm-static")
    assert not base_shows(refused, "config-complete", "vllm-adaptive")


def test_more_undone_work_than_the_base_on_the_same_state_is_measured() -> None:
    comparison = gap_against_base(SEED, THROTTLED)
    assert comparison is not None and comparison.base == "vllm-adaptive" and comparison.step == 0
    assert comparison.gap > comparison.base_gap and exceeds(comparison, 0)
    assert not exceeds(comparison, comparison.excess)  # --max-work-gap accepts the trade
    assert gap_against_base(SEED, COPY) is None


def outcome(policy: str, obligation: str, trace, verdict: str = REFUTED) -> Outcome:  # type: ignore[no-untyped-def]
    return Outcome(policy, obligation, verdict, "search", 0.0, "d", traces=(trace,) if verdict == REFUTED else ())


def test_judge_fails_a_user_policy_on_its_own_refutations_of_every_obligation() -> None:
    f1 = finding_trace("f1-vllm-adaptive-padded-threshold.json")
    outcomes = [outcome(COPY, "token-cap", SEED), outcome(COPY, "spec-shape", f1), outcome(COPY, "model-len", SEED),
                outcome(COPY, "seq-cap", SEED, PROVED), outcome(COPY, "work-conserving", SEED)]
    assert set(judge(outcomes).complaints) == {(COPY, "token-cap"), (COPY, "model-len")}
    strict = judge(outcomes, strict=True).complaints
    assert (COPY, "spec-shape") in strict and "known (finding F1" in strict[(COPY, "spec-shape")]


def test_judge_fails_more_undone_work_than_the_base_printing_both_gaps() -> None:
    complaint = judge([outcome(THROTTLED, "work-conserving", SEED)]).complaints[(THROTTLED, "work-conserving")]
    comparison = gap_against_base(SEED, THROTTLED)
    assert comparison is not None
    assert f"leaves {comparison.gap} tokens" in complaint and f"vllm-adaptive {comparison.base_gap}" in complaint
    assert not judge([outcome(THROTTLED, "work-conserving", SEED)], max_work_gap=comparison.excess).complaints
    assert Judge(COPY).of_refutation("work-conserving", (SEED,), "prove") is None


def test_inconsistent_loop_flags_are_refused_when_the_policy_loads() -> None:
    with pytest.raises(ConfigError, match=r"^policy-error: PaddedWithoutDrafts runs on NoDraftsLoop, whose flags "
                                          r"disagree: pads_short_admissions=True with drafts_in_grant=False .*; set "):
        get_policy("verdict_policies:PaddedWithoutDrafts")
    with pytest.raises(ConfigError, match="whose pads_short_admissions is None, not a bool"):
        get_policy("verdict_policies:MissingFlag")


def test_a_real_stall_of_a_vllm_user_policy_is_its_own() -> None:
    from tokenbudget.model.replay import replay_on_model
    from tokenbudget.spec.trace import AddOp, StepOp, Trace

    stall = Trace("verdict_policies:StallsSingleTokens", {"method": None},
                  (AddOp("0", 4, 3), StepOp({}), StepOp({}), StepOp({})))
    assert "progress" in {v.invariant for v in replay_on_model(stall).violations}
    verdict = Judge("verdict_policies:StallsSingleTokens").of_refutation("progress", (stall,), "prove")
    assert verdict is not None and verdict.known is None and verdict.phrase() == "its own violation"
