"""SGLang's policies under ``prove``: the bounded trace search refutes the spec-v1 retraction
bug with a minimal replaying trace, the fixed code only by finding F6, and finds nothing in the
released code. The verdicts are those of the session's ``prove`` of every built-in
(``builtin_proofs``): the same call, run once."""
from __future__ import annotations

import pytest

from tokenbudget.cli import main
from tokenbudget.model import get_policy
from tokenbudget.model.findings import FINDINGS, explaining_finding
from tokenbudget.model.replay import replay_on_model
from tokenbudget.proofs.loop_search import SEARCHED, skeleton_models, skeleton_policies
from tokenbudget.proofs.obligation_table import all_obligations
from tokenbudget.proofs.verdicts import MODEL_SEARCH, PROVED_UP_TO, REFUTED, Outcome

SGLANG = ("sglang-0.5.23", "sglang-v1-retract", "sglang-v1-retract-fixed", "sglang-v1-page-boundary")


def proved(builtin_proofs: list[Outcome], policy: str) -> dict[str, Outcome]:
    """obligation -> the outcome of its proof for one built-in policy."""
    return {o.obligation: o for o in builtin_proofs if o.policy == policy}


def test_the_skeleton_takes_no_sglang_policy() -> None:
    assert not any(name in skeleton_policies() for name in SGLANG)
    assert "vllm-adaptive" in skeleton_policies() and skeleton_models(get_policy("fastdeploy-v0"))


@pytest.mark.parametrize("policy", ["trtllm", "trtllm-one-model-unreserved"])
def test_trtllm_capacity_pass_is_searched_not_skeleton_proved(policy: str) -> None:
    """TensorRT-LLM's loop runs a capacity pass of its own, which the skeleton does not follow."""
    assert not skeleton_models(get_policy(policy))
    applicable = [o.id for o in all_obligations().values() if o.applies(get_policy(policy))]
    assert sorted(applicable) == sorted(SEARCHED)


@pytest.mark.parametrize("policy", SGLANG)
def test_sglang_obligations_are_the_searched_invariants(policy: str) -> None:
    applicable = [o.id for o in all_obligations().values() if o.applies(get_policy(policy))]
    assert sorted(applicable) == sorted(SEARCHED)


def test_the_retraction_bug_is_refuted_by_a_minimal_replaying_trace(builtin_proofs: list[Outcome]) -> None:
    outcomes = proved(builtin_proofs, "sglang-v1-retract")
    refuted = outcomes["kv-capacity"]
    assert refuted.verdict == REFUTED and outcomes["token-cap"].verdict == PROVED_UP_TO
    trace = refuted.traces[0]
    assert trace.config["block_size"] == 1 and trace.num_steps == 2  # one prefill, one decode
    result = replay_on_model(trace)
    assert result.ok and "kv-capacity" in {v.invariant for v in result.violations}
    assert not replay_on_model(trace, "sglang-v1-retract-fixed").violations


def test_the_released_code_is_not_refuted_within_the_bound(builtin_proofs: list[Outcome]) -> None:
    outcomes = list(proved(builtin_proofs, "sglang-0.5.23").values())
    assert outcomes and all(o.verdict == PROVED_UP_TO and o.method == MODEL_SEARCH for o in outcomes)
    assert all("not a proof" in o.detail and o.label == "searched up to 6" for o in outcomes)


def test_the_retraction_fix_is_refuted_only_by_a_kv_ending_on_a_full_page(builtin_proofs: list[Outcome]) -> None:
    """With #14939 the page-1 trace is clean; finding F6 (PR #14180's page check) remains."""
    outcomes = proved(builtin_proofs, "sglang-v1-retract-fixed")
    refuted = {name for name, o in outcomes.items() if o.verdict == REFUTED}
    assert refuted == {"kv-capacity"}
    trace = outcomes["kv-capacity"].traces[0]
    assert trace.config["block_size"] > 2 + 2 * trace.config["num_speculative_tokens"]
    assert explaining_finding(trace, "kv-capacity") == FINDINGS["F6"]
    assert not replay_on_model(trace, "sglang-0.5.23").violations


def test_replay_of_the_corpus_trace(capsys: pytest.CaptureFixture[str]) -> None:
    from tokenbudget.spec.corpus import CORPUS_DIR

    path = str(CORPUS_DIR / "sglang-v1-retract-decode-oom.json")
    assert main(["replay", path]) == 1  # a violation, as the trace expects
    assert "violated, as expected (kv-capacity)" in capsys.readouterr().out
    assert main(["replay", path, "--policy", "sglang-v1-retract-fixed"]) == 1
    assert "UNMET  kv-capacity was not violated" in capsys.readouterr().out
