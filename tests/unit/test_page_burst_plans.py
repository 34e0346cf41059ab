"""A full batch on page edges: every seat filled with one page-edge prompt, on a pool a few
pages past what they hold, on configs the policy accepts (one plan in two on small pages instead)."""
from __future__ import annotations

from hypothesis import HealthCheck, given, settings

from tokenbudget.fuzz.config_strategies import rare_path_configs
from tokenbudget.fuzz.page_burst_plans import SMALL_PAGES, Plan, page_burst_plans
from tokenbudget.fuzz.request_shapes import MAX_BURST, prompt_len
from tokenbudget.model import get_policy
from tokenbudget.model.config_edges import validates
from tokenbudget.spec.intlike import cdiv


def test_a_plan_fills_every_seat_at_a_page_edge_with_pages_to_spare() -> None:
    policy = get_policy("sglang-0.5.23")
    seats_filled, small = [], []

    @settings(suppress_health_check=list(HealthCheck), max_examples=40, database=None)
    @given(page_burst_plans(policy, rare_path_configs(policy)["page-edge"]))
    def plan(drawn: Plan) -> None:
        cfg, requests, later, passes = drawn
        assert validates(policy, cfg)
        assert len(requests) == cfg.max_num_seqs and len(set(requests)) == 1 and later == (0, [])
        if cfg.block_size in SMALL_PAGES:  # a small-page plan (test_aimed_plans): 1 in 2
            small.append(True)
            return
        length = prompt_len(requests[0], cfg, cfg.max_num_batched_tokens, 0)
        assert length % cfg.block_size in (0, cfg.block_size - 1)  # on a page edge, or a token short of one
        held = cdiv(length, cfg.block_size) * len(requests)
        assert cfg.num_kv_blocks > held and passes >= held
        seats_filled.append(cfg.max_num_seqs == MAX_BURST)

    plan()
    assert sum(seats_filled) >= len(seats_filled) // 2
    assert small and seats_filled
