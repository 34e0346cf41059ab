"""Each built-in policy's validation at its boundaries, and its budget arithmetic."""
from __future__ import annotations

import pytest

from tokenbudget.model import BudgetConfig, ConfigError, builtin_policies, get_policy
from tokenbudget.model import methods

SPEC = dict(num_speculative_tokens=4, method="ngram", parallel_drafting=True)  # d = 3


def accepts(policy: str, **knobs) -> bool:
    try:
        get_policy(policy).validate(BudgetConfig(**knobs))
    except ConfigError:
        return False
    return True


def test_builtin_policies_with_docs():
    policies = builtin_policies()
    assert list(policies) == [
        "vllm-adaptive", "vllm-static", "fastdeploy-v0", "fastdeploy-reserve", "fastdeploy-reserve-cherrypick",
        "fastdeploy-decode-count", "fastdeploy-spec-method", "fastdeploy-mtp-only",
        "trtllm", "trtllm-one-model-unreserved",
        "sglang-0.5.23", "sglang-v1-retract", "sglang-v1-retract-fixed", "sglang-v1-page-boundary",
    ]
    for cls in policies.values():
        assert cls.__doc__ and cls.description and cls.engine and cls.version


def test_method_table_matches_vllm_0_32_docstring():
    # vllm/config/speculative.py, SpeculativeConfig.max_num_new_slots_for_drafting
    k = 5
    expected = {("eagle3", False): 0, ("eagle3", True): k - 1, ("dflash", True): k, ("dspark", True): k - 1,
                ("mtp", False): 0, ("ngram", False): 0, ("ngram", True): k - 1, ("draft_model", False): 1,
                ("draft_model", True): k}
    for (method, parallel), d in expected.items():
        assert methods.draft_slots("vllm-0.32", method, k, parallel) == d, (method, parallel)
    # VllmConfig.num_lookahead_tokens
    assert {m: methods.lookahead("vllm-0.32", m, k) for m in methods.VLLM_0_32} == {
        "eagle3": k, "mtp": k, "dflash": k + 1, "dspark": k, "ngram": 0, "draft_model": k}


def test_vllm_adaptive_needs_b_above_d_in_0_32():
    assert not accepts("vllm-adaptive", max_num_batched_tokens=3, max_num_seqs=1, max_model_len=64,
                       engine_version="0.32", **SPEC)
    assert accepts("vllm-adaptive", max_num_batched_tokens=4, max_num_seqs=1, max_model_len=64,
                   engine_version="0.32", **SPEC)


def test_vllm_adaptive_accepts_the_seed_config_that_static_refuses():
    seed = dict(max_num_batched_tokens=20, max_num_seqs=16, max_model_len=64, **SPEC)
    assert accepts("vllm-adaptive", **seed)
    with pytest.raises(ConfigError, match="max_num_batched_tokens.*max_num_seqs.*num_speculative_tokens"):
        get_policy("vllm-static").validate(BudgetConfig(**seed))


def test_vllm_static_boundary():
    # T = B - d*S: 48 - 3*16 = 0 refused, 49 - 48 = 1 accepted
    assert not accepts("vllm-static", max_num_batched_tokens=48, max_num_seqs=16, max_model_len=64, **SPEC)
    assert accepts("vllm-static", max_num_batched_tokens=49, max_num_seqs=16, max_model_len=64, **SPEC)


def test_vllm_scheduler_config_checks():
    assert not accepts("vllm-adaptive", max_num_batched_tokens=15, max_num_seqs=16, max_model_len=64)
    assert not accepts("vllm-adaptive", max_num_batched_tokens=63, max_num_seqs=16, max_model_len=64,
                       enable_chunked_prefill=False)
    assert accepts("vllm-adaptive", max_num_batched_tokens=64, max_num_seqs=16, max_model_len=64,
                   enable_chunked_prefill=False)


FD = dict(max_num_batched_tokens=640, max_num_seqs=128, max_model_len=1024, num_speculative_tokens=4, method="mtp")


@pytest.mark.parametrize("name", [n for n in builtin_policies() if n.startswith("fastdeploy")])
def test_fastdeploy_engine_limits(name):
    assert not accepts(name, **{**FD, "num_speculative_tokens": 6})
    assert not accepts(name, **{**FD, "max_num_seqs": 513, "max_num_batched_tokens": 8192})
    assert not accepts(name, **{**FD, "scheduling_policy": "priority"})
    assert not accepts(name, **{**FD, "method": "eagle3"})
    assert not accepts(name, **{**FD, "max_num_batched_tokens": 127})
    assert not accepts(name, **{**FD, "max_model_len": 4, "max_num_batched_tokens": 640, "max_num_seqs": 128,
                                "num_kv_blocks": 64})


def test_fastdeploy_decode_count_startup_check():
    # B >= S * (k + 1)
    assert not accepts("fastdeploy-decode-count", **{**FD, "max_num_batched_tokens": 639})
    assert accepts("fastdeploy-decode-count", **FD)
    ngram = {**FD, "method": "ngram", "max_num_batched_tokens": 128}
    assert not accepts("fastdeploy-decode-count", **ngram)
    assert not accepts("fastdeploy-spec-method", **ngram)  # #7623 as merged: any method reserves k + 1
    assert accepts("fastdeploy-mtp-only", **ngram)  # the PR's first revision: only mtp does
    plain = {k: v for k, v in FD.items() if k not in ("method", "num_speculative_tokens")}
    s = plain["max_num_seqs"]
    assert not accepts("fastdeploy-decode-count", **{**plain, "max_num_batched_tokens": 2 * s - 1})  # t = 2
    assert accepts("fastdeploy-decode-count", **{**plain, "max_num_batched_tokens": 2 * s})
    assert accepts("fastdeploy-spec-method", **{**plain, "max_num_batched_tokens": s})  # t = 1


def test_fastdeploy_startup_checks_as_merged():
    at = {**FD, "engine_version": "564c78d78"}  # the real engine's startup asserts: a config of a commit
    assert not accepts("fastdeploy-spec-method", **{**at, "max_model_len": 15})
    assert not accepts("fastdeploy-spec-method", **{**at, "max_model_len": 16})  # max_model_len % 64 (append_attn_backend.py:80)
    assert accepts("fastdeploy-spec-method", **{**at, "max_model_len": 64})
    assert not accepts("fastdeploy-spec-method", **{**at, "max_model_len": 64, "block_size": 16, "num_kv_blocks": 5})
    assert accepts("fastdeploy-spec-method", **{**at, "max_model_len": 64, "block_size": 16, "num_kv_blocks": 6})  # 64 // 16 + 2
    small = {**at, "max_num_seqs": 2, "max_num_batched_tokens": 10, "block_size": 16, "num_speculative_tokens": 4}
    assert not accepts("fastdeploy-spec-method", **small)  # B >= block_size with chunked prefill
    assert accepts("fastdeploy-spec-method", **{**small, "enable_chunked_prefill": False})


def test_fastdeploy_without_a_commit_is_the_paged_pool_model():
    """No tile or pool assert, and prompts up to max_model_len - 1 (SPEC.md §11)."""
    assert not accepts("fastdeploy-v0", **{**FD, "max_model_len": 15})  # FDConfig.check's own minimum
    assert accepts("fastdeploy-v0", **{**FD, "max_model_len": 16})
    assert accepts("fastdeploy-v0", **{**FD, "max_model_len": 64, "block_size": 16, "num_kv_blocks": 5})
    loop = get_policy("fastdeploy-v0").loop
    assert loop.longest_prompt(BudgetConfig(**{**FD, "max_model_len": 64})) == 63
    assert loop.longest_prompt(BudgetConfig(**{**FD, "max_model_len": 64, "engine_version": "564c78d78"})) == 62


def budgets(name, num_decoding=0, **knobs):
    policy = get_policy(name)
    return policy.initial_budgets(policy.params(BudgetConfig(**knobs)), num_decoding)


def test_initial_budgets():
    assert budgets("vllm-adaptive", max_num_batched_tokens=20, max_num_seqs=16, **SPEC).token == 20
    assert budgets("vllm-adaptive", max_num_batched_tokens=20, max_num_seqs=16, **SPEC).input == 20
    assert budgets("vllm-static", max_num_batched_tokens=8192, max_num_seqs=1024,
                   num_speculative_tokens=7, method="eagle3", parallel_drafting=True).token == 8192 - 6 * 1024
    assert budgets("fastdeploy-v0", **FD).token == 640
    assert budgets("fastdeploy-reserve", **FD).token == 512  # max(640 - 640, min(640, 512))
    assert budgets("fastdeploy-reserve", **{**FD, "max_num_seqs": 8}).token == 600
    assert budgets("fastdeploy-decode-count", 3, **FD).token == 640 - 15
    assert budgets("fastdeploy-spec-method", 3, **{**FD, "method": "ngram"}).token == 640 - 15
    assert budgets("fastdeploy-mtp-only", 3, **{**FD, "method": "ngram"}).token == 640 - 3
    plain = dict(max_num_batched_tokens=640, max_num_seqs=128, max_model_len=1024)
    assert budgets("fastdeploy-decode-count", 3, **plain).token == 640 - 6  # the config object's k = 1
    assert budgets("fastdeploy-spec-method", 3, **plain).token == 640 - 3


def test_cherrypick_precedence_bug_without_speculation():
    plain = dict(max_num_batched_tokens=8192, max_num_seqs=128, max_model_len=1024)
    assert budgets("fastdeploy-reserve", **plain).token == 8192 - 2 * 128  # t = 2: the config object's k = 1
    assert budgets("fastdeploy-reserve-cherrypick", **plain).token == 512  # max(1, min(8192, 512))
    assert budgets("fastdeploy-reserve-cherrypick", **FD).token == budgets("fastdeploy-reserve", **FD).token


def test_adaptive_grant_charge_and_exit_rule():
    policy = get_policy("vllm-adaptive")
    p = policy.params(BudgetConfig(max_num_batched_tokens=20, max_num_seqs=16, **SPEC))
    b = policy.initial_budgets(p, 0)
    assert policy.grant(p, 10, b) == 10
    b = policy.spend(b, policy.charge(p, 10, False), -1)
    assert (b.token, b.input) == (10, 7)
    assert policy.grant(p, 10, b) == 4
    b = policy.spend(b, policy.charge(p, 4, False), -1)
    assert (b.token, b.input) == (6, 0)
    assert not policy.may_schedule(p, b)
    assert policy.refund(p, 4, False) == policy.charge(p, 4, False)


def test_fastdeploy_decode_runs_k_plus_one_rows():
    policy = get_policy("fastdeploy-v0")
    p = policy.params(BudgetConfig(**FD))
    assert policy.runner_rows(p, 1, True) == 5
    assert policy.runner_rows(p, 100, False) == 100
    assert policy.charge(p, 1, True).token == 1
    assert get_policy("fastdeploy-decode-count").charge(p, 1, True).token == 0


def test_get_policy_errors_are_one_line():
    with pytest.raises(ConfigError, match="unknown policy 'nope'"):
        get_policy("nope")
    with pytest.raises(ConfigError, match="cannot import policy module"):
        get_policy("no_such_module_xyz:Policy")
    with pytest.raises(ConfigError, match="not a BudgetPolicy"):
        get_policy("tokenbudget.model.config:BudgetConfig")
    with pytest.raises(ConfigError, match="names no scheduling loop"):
        get_policy("tokenbudget.model.policy:BudgetPolicy")


def test_user_policy_by_module_path():
    policy = get_policy("tokenbudget.model.vllm.policies:VllmAdaptive")
    assert policy.name == "vllm-adaptive"
