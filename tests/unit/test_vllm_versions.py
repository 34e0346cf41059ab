"""The vLLM version table: one policy across 0.32, 0.33 and 0.34, the differences as data."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from tokenbudget.model import BudgetConfig, ConfigError, get_policy, methods, scheduler_for
from tokenbudget.model.findings import FINDINGS, explaining_finding, findings_of
from tokenbudget.model.replay import replay_on_model
from tokenbudget.model.vllm.versions import (DEFAULT_VERSION, MODELLED, NEWEST, VLLM_VERSIONS, modelled_version,
                                             nearest_version)
from tokenbudget.spec.trace import load_trace, parse_trace

ROOT = Path(__file__).resolve().parents[2]
SEED = dict(max_num_batched_tokens=20, max_num_seqs=16, num_speculative_tokens=4, method="dflash",
            parallel_drafting=True, max_model_len=64)


def first_grants(cfg: BudgetConfig) -> dict[str, int]:
    sched = scheduler_for(cfg, get_policy("vllm-adaptive"))
    sched.add_request("0", 10, 8)
    sched.add_request("1", 10, 8)
    return dict(sched.schedule().num_scheduled_tokens)


def test_every_version_names_a_method_table_of_the_same_methods() -> None:
    assert MODELLED == ("0.32", "0.33", "0.34") and NEWEST == "0.34" and DEFAULT_VERSION == "0.33"
    for row in VLLM_VERSIONS.values():
        assert set(methods.TABLES[row.table]) == set(methods.VLLM_0_32)


def test_the_schema_lists_the_modelled_versions() -> None:
    schema = json.loads((ROOT / "tokenbudget" / "spec" / "trace.schema.json").read_text())
    described = schema["$defs"]["config"]["properties"]["engine_version"]["description"]
    assert all(v in described for v in MODELLED) and f"({DEFAULT_VERSION})" in described


@pytest.mark.parametrize(("release", "modelled", "nearest"), [
    ("0.32.0", "0.32", "0.32"), ("0.33.0", "0.33", "0.33"), ("0.33.1rc1.dev4+gabc", "0.33", "0.33"),
    ("0.34.0", "0.34", "0.34"), ("0.31.2", None, "0.32"), ("0.40.0.dev0", None, "0.34"), ("unknown", None, "0.34"),
])
def test_a_release_maps_to_its_version_or_the_nearest(release: str, modelled: str | None, nearest: str) -> None:
    assert modelled_version(release) == modelled
    assert nearest_version(release) == nearest


def test_seed_000_with_dflash_is_granted_what_each_version_grants() -> None:
    assert first_grants(BudgetConfig(**SEED, engine_version="0.32")) == {"0": 10, "1": 2}  # d = k = 4
    assert first_grants(BudgetConfig(**SEED, engine_version="0.33")) == {"0": 10, "1": 10}  # d = 0
    assert first_grants(BudgetConfig(**SEED, engine_version="0.34")) == {"0": 10, "1": 10}
    assert first_grants(BudgetConfig(**SEED)) == {"0": 10, "1": 10}  # absent: the default, 0.33


def test_an_unmodelled_engine_version_is_refused_naming_the_modelled_ones() -> None:
    with pytest.raises(ConfigError, match=r"engine_version '0\.31'.*0\.32, 0\.33"):
        get_policy("vllm-adaptive").validate(BudgetConfig(**SEED, engine_version="0.31"))
    with pytest.raises(ConfigError, match="remove engine_version"):
        get_policy("fastdeploy-v0").validate(BudgetConfig(engine_version="0.33"))
    with pytest.raises(ConfigError, match=r"engine_version '0\.33'.*0\.32"):  # static runs on 0.32's loop only
        get_policy("vllm-static").validate(BudgetConfig(engine_version="0.33"))


def test_0_33_asks_b_above_the_lookahead_where_0_32_asked_b_above_the_draft_slots() -> None:
    f4 = dict(max_num_batched_tokens=4, max_num_seqs=2, num_speculative_tokens=4, method="draft_model",
              block_size=4, max_model_len=64)
    policy = get_policy("vllm-adaptive")
    policy.validate(BudgetConfig(**f4, engine_version="0.32"))  # B = 4 > d = 1
    with pytest.raises(ConfigError, match=r"lookahead slots of one request \(L=4"):
        policy.validate(BudgetConfig(**f4, engine_version="0.33"))


def test_0_33_caps_dflash_running_requests_to_b_over_l() -> None:
    # L = k + 1 = 5: 0.33 runs at most 20 // 5 = 4 of six 2-token prompts (2 rows each, d = 0);
    # 0.32 fits three (2 + d = 6 rows each)
    for version, running in (("0.32", 3), ("0.33", 4)):
        sched = scheduler_for(BudgetConfig(**SEED, engine_version=version), get_policy("vllm-adaptive"))
        for i in range(6):
            sched.add_request(str(i), 2, 4)
        assert len(sched.schedule().running) == running, version


def test_findings_carry_the_versions_they_affect() -> None:
    assert {f.id for f in findings_of("vllm", "0.32")} == {"F1", "F2", "F3", "F4", "F9", "F10"}
    assert {f.id for f in findings_of("vllm", "0.33")} == {"F1", "F2", "F4", "F9", "F10"}  # F3 fixed in 0.33
    assert {f.id for f in findings_of("vllm", "0.34")} == {"F1", "F2", "F4", "F10"}  # F9: 0.34 has Model Runner V2 only
    assert all(f.affects_versions for f in FINDINGS.values())


def test_the_f3_trace_stalls_on_0_32_and_not_on_0_33() -> None:
    trace = load_trace(FINDINGS["F3"].trace_path)
    assert explaining_finding(trace, "progress").id == "F3"
    moved = parse_trace({**json.loads(Path(trace.source).read_text()),
                                    "config": {**trace.config, "engine_version": "0.33"}, "expect": []})
    result = replay_on_model(moved)
    assert not result.violations and explaining_finding(moved, "progress") is None


def test_the_f4_trace_opens_f4_on_both_versions_and_b_4_is_refused_on_0_33() -> None:
    trace = load_trace(FINDINGS["F4"].trace_path)
    for version in ("0.32", "0.33"):  # B = 5 > L = 4 passes 0.33's check, yet 1 + k = 5 rows exceed B - d = 4
        assert FINDINGS["F4"].opens(get_policy("vllm-adaptive"), BudgetConfig.from_dict({**trace.config, "engine_version": version}))
    with pytest.raises(ConfigError):
        get_policy("vllm-adaptive").validate(BudgetConfig.from_dict(
            {**trace.config, "max_num_batched_tokens": 4, "engine_version": "0.33"}))


def test_0_34_has_parallel_drafting_only_for_dflash_and_dspark() -> None:
    policy = get_policy("vllm-adaptive")
    for method in ("eagle3", "mtp", "ngram", "draft_model"):
        with pytest.raises(ConfigError, match="parallel_drafting=false"):
            policy.validate(BudgetConfig(**{**SEED, "method": method}, engine_version="0.34"))
        policy.validate(BudgetConfig(**{**SEED, "method": method}, engine_version="0.33"))
    for method in ("dflash", "dspark"):
        policy.validate(BudgetConfig(**{**SEED, "method": method}, engine_version="0.34"))


def test_0_34_reads_long_prefill_threshold_only_with_chunked_prefill() -> None:
    # two 40-token prompts, chunked prefill off, threshold 8: 0.33 cuts both admissions to 8 tokens
    # each; 0.34 ignores the threshold and admits both whole
    cfg = dict(max_num_batched_tokens=128, max_num_seqs=4, max_model_len=64, enable_chunked_prefill=False,
               long_prefill_token_threshold=8)
    grants = {}
    for version in ("0.33", "0.34"):
        sched = scheduler_for(BudgetConfig(**cfg, engine_version=version), get_policy("vllm-adaptive"))
        sched.add_request("0", 40, 4)
        sched.add_request("1", 40, 4)
        grants[version] = dict(sched.schedule().num_scheduled_tokens)
    assert grants["0.34"] == {"0": 40, "1": 40}
    assert grants["0.33"] == {"0": 8, "1": 8}
