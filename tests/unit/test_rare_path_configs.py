"""The rare-path config shapes: each applies where its path exists, draws only configs the
policy accepts, and most of its draws open the finding it aims at (``Finding.opens``)."""
from __future__ import annotations

from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from tokenbudget.fuzz.config_strategies import rare_path_configs
from tokenbudget.fuzz.request_shapes import MAX_BURST, RequestShape, page_bursts, prompt_len
from tokenbudget.fuzz.seeded_draws import seeded_draws
from tokenbudget.model import BudgetConfig, get_policy
from tokenbudget.model.config_edges import validates
from tokenbudget.model.findings import FINDINGS
from tokenbudget.spec.intlike import cdiv

SAMPLE = 60


def sample(strategy: st.SearchStrategy[BudgetConfig]) -> list[BudgetConfig]:
    drawn: list[BudgetConfig] = []

    @settings(settings.get_profile("default"), derandomize=True, database=None, max_examples=SAMPLE,
              phases=[Phase.generate], suppress_health_check=list(HealthCheck))
    @given(strategy)
    def draw(cfg: BudgetConfig) -> None:
        drawn.append(cfg)

    with seeded_draws():
        draw()
    return drawn


def test_each_shape_applies_only_where_its_path_exists() -> None:
    assert set(rare_path_configs(get_policy("vllm-adaptive"))) == {
        "full-batch", "admission-over-room", "priority-preemption", "async", "older-version"}
    assert set(rare_path_configs(get_policy("fastdeploy-spec-method"))) == {"full-batch"}  # F5: both commits
    assert set(rare_path_configs(get_policy("sglang-v1-retract-fixed"))) == {"page-edge"}
    # its pool holds max_model_len + k + L; T1 affects GUARANTEED_NO_EVICT alone, not the default deployment
    assert set(rare_path_configs(get_policy("trtllm"))) == {"page-edge", "older-version"}


def test_trtllm_page_edge_draws_are_accepted() -> None:
    pol = get_policy("trtllm")
    assert all(validates(pol, cfg) for cfg in sample(rare_path_configs(pol)["page-edge"]))


def opening(policy: str, shape: str, finding: str) -> float:
    """The share of the shape's draws for ``policy`` that the policy accepts and that open ``finding``."""
    pol = get_policy(policy)
    drawn = sample(rare_path_configs(pol)[shape])
    assert all(validates(pol, cfg) for cfg in drawn)
    return sum(FINDINGS[finding].opens(pol, cfg) for cfg in drawn) / len(drawn)


def test_a_full_batch_spends_fastdeploys_budget() -> None:
    assert opening("fastdeploy-spec-method", "full-batch", "F5") >= 0.5
    assert opening("fastdeploy-decode-count", "full-batch", "F5") >= 0.5


def test_an_admission_over_the_room_opens_the_padding_the_threshold_or_the_unchunked_prompt() -> None:
    assert sum(opening("vllm-adaptive", "admission-over-room", f) for f in ("F1", "F2", "F4")) >= 0.75


def test_pages_past_the_reach_of_a_verify() -> None:
    assert opening("sglang-v1-retract-fixed", "page-edge", "F6") >= 0.5


def test_priority_preemption_runs_every_version_on_a_pool_of_one_sequence() -> None:
    pol = get_policy("vllm-adaptive")
    drawn = sample(rare_path_configs(pol)["priority-preemption"])
    assert all(cfg.scheduling_policy == "priority" for cfg in drawn)
    assert all(cfg.num_kv_blocks <= cdiv(cfg.max_model_len, cfg.block_size) + 2 for cfg in drawn)
    assert {cfg.engine_version for cfg in drawn} == {"0.32", "0.33", "0.34"}


def test_older_versions_are_drawn_only_where_the_policy_models_several() -> None:
    drawn = sample(rare_path_configs(get_policy("vllm-adaptive"))["older-version"])
    assert {cfg.engine_version for cfg in drawn} == {"0.32", "0.34"}  # all but the default, 0.33
    assert "older-version" not in rare_path_configs(get_policy("vllm-static"))


def test_a_page_burst_is_copies_of_a_prompt_at_a_page_edge() -> None:
    cfg = BudgetConfig(block_size=16, max_model_len=64, max_num_batched_tokens=64, num_kv_blocks=16)

    @settings(suppress_health_check=list(HealthCheck), max_examples=50, database=None)
    @given(page_bursts())
    def burst(shapes: list[RequestShape]) -> None:
        assert 2 <= len(shapes) <= MAX_BURST and len(set(shapes)) == 1
        assert prompt_len(shapes[0], cfg, 64, 0) in (16, 32)

    burst()


def test_async_draws_run_vllms_async_scheduler_and_open_its_async_findings() -> None:
    pol = get_policy("vllm-adaptive")
    drawn = sample(rare_path_configs(pol)["async"])
    assert drawn and all(cfg.async_scheduling and cfg.method != "ngram" for cfg in drawn)
    assert opening("vllm-adaptive", "async", "F10") >= 0.5
    assert "async" not in rare_path_configs(get_policy("fastdeploy-spec-method"))
