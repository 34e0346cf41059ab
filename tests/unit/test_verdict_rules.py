"""How a user policy's violations are judged (``model.verdict_rules``, ``proofs.prove.judge``):
every obligation, known only by a finding's matcher or the base on the same trace, and
efficiency against the base."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

from tokenbudget.model import ConfigError, get_policy
from tokenbudget.model.verdict_rules import (
    base_policy, base_shows, exceeds, explanation, gap_against_base, judged, refutation_complaint,
)
from tokenbudget.proofs.prove import judge
from tokenbudget.proofs.verdicts import PROVED, REFUTED, Outcome
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


def test_every_obligation_but_efficiency_is_judged() -> None:
    assert judged("config-sound") and judged("config-complete") and judged("progress") and judged("model-error")
    assert not judged("work-conserving") and not judged("no-fewer-tokens-than-static")


def test_a_finding_explains_a_violation_only_by_its_matcher() -> None:
    f1 = finding_trace("f1-vllm-adaptive-padded-threshold.json")
    assert "F1" in (explanation(f1, "spec-shape", COPY) or "")
    # the same engine and a progress violation, but no finding's mechanism in this run: the policy's own
    assert explanation(SEED, "progress", THROTTLED) is None


def test_a_copy_of_a_known_bad_builtin_owns_its_run_violations() -> None:
    overflow = next(t for t in load_corpus(findings=False) if t.source.endswith("fastdeploy-v0-rows-overflow.json"))
    assert base_shows(overflow, "input-rows-cap", "fastdeploy-v0")  # the base shows it on the same trace ...
    assert explanation(overflow, "input-rows-cap", "verdict_policies:CopyV0") is None  # ... yet it is the copy's own
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
    assert refutation_complaint(COPY, "work-conserving", (SEED,)) is None


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
    assert explanation(stall, "progress", "verdict_policies:StallsSingleTokens") is None
    assert refutation_complaint("verdict_policies:StallsSingleTokens", "progress", (stall,)) == "its own violation"
