"""The start plans a user policy draws (``fuzz.aimed_plans``): each applies where its path
exists, draws configs the policy accepts, and its runs reach the path it aims at (and, on a
policy with the bug the path shows, break the invariant; on the built-in that has none, not)."""
from __future__ import annotations

from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from tokenbudget.fuzz.aimed_plans import aimed_plans
from tokenbudget.fuzz.chunk_beside_decode_plans import chunk_beside_decode_plans
from tokenbudget.fuzz.config_strategies import config_space, rare_path_configs
from tokenbudget.fuzz.model_len_pad_plans import model_len_pad_plans
from tokenbudget.fuzz.page_burst_plans import Plan, small_page_plans
from tokenbudget.fuzz.request_shapes import MAX_BURST, resolve
from tokenbudget.fuzz.seeded_draws import seeded_draws
from tokenbudget.model import BudgetPolicy, get_policy
from tokenbudget.model.config_edges import validates
from tokenbudget.model.vllm.policies import VllmAdaptive
from tokenbudget.model.target import ModelTarget
from tokenbudget.spec.execution import Execution
from tokenbudget.spec.invariants import check_step
from tokenbudget.spec.records import StepRecord
from tokenbudget.spec.trace import StepOp

SAMPLE = 40
DRAIN = 24  # steps after a plan's own: its requests are short


def sample(strategy: st.SearchStrategy[Plan]) -> list[Plan]:
    drawn: list[Plan] = []

    @settings(settings.get_profile("default"), derandomize=True, database=None, max_examples=SAMPLE,
              phases=[Phase.generate], suppress_health_check=list(HealthCheck))
    @given(strategy)
    def draw(plan: Plan) -> None:
        drawn.append(plan)

    with seeded_draws():
        draw()
    return drawn


def run(policy: BudgetPolicy, plan: Plan) -> list[StepRecord]:
    """The steps of the plan as ``machine_class`` starts it, then ``DRAIN`` idle ones, up to
    the first that breaks an invariant."""
    cfg, first, (wait, more), passes = plan
    execution = Execution(ModelTarget(cfg, policy))
    lim = execution.run.limits
    chunk = max(1, min(lim.max_num_batched_tokens - lim.draft_slots, lim.max_num_scheduled_tokens))
    added = 0

    def add(shapes: list) -> None:
        nonlocal added
        for shape in shapes:
            execution.apply(resolve(shape, cfg, chunk, lim.draft_slots, added, policy.loop.longest_prompt(cfg)))
            added += 1

    add(first)
    for i in range((wait if more else 0) + passes + DRAIN):
        if i == wait:
            add(more)
        record = execution.apply(StepOp({}))
        if check_step(record) or record.error:
            break
    return execution.run.steps


def breaks(policy: BudgetPolicy, plans: list[Plan], invariant: str) -> int:
    """How many of the plans' runs break ``invariant``."""
    return sum(any(v.invariant == invariant for v in check_step(run(policy, plan)[-1])) for plan in plans)


def test_each_plan_applies_where_its_path_exists() -> None:
    def applies(name: str) -> tuple[bool, bool]:
        pol = get_policy(name)
        space = config_space(pol)
        return not chunk_beside_decode_plans(pol, space).is_empty, not model_len_pad_plans(pol, space).is_empty

    assert applies("vllm-adaptive") == (True, True)
    assert applies("trtllm") == (True, False)
    assert applies("fastdeploy-spec-method") == (True, False)
    assert applies("sglang-v1-retract") == (False, False)  # a step prefills or decodes, never both
    pol = get_policy("sglang-v1-retract")
    assert not aimed_plans(pol, rare_path_configs(pol), config_space(pol)).is_empty  # its page bursts


def test_small_pages_fill_every_seat_within_a_verifys_reach_and_outgrow_the_pool() -> None:
    pol = get_policy("sglang-v1-retract")
    plans = sample(small_page_plans(pol, rare_path_configs(pol)["page-edge"]))
    for cfg, requests, later, passes in plans:
        assert validates(pol, cfg) and later == (0, []) and len(set(requests)) == 1
        assert cfg.block_size <= 2 + 2 * cfg.num_speculative_tokens  # the page check counts every decode
        assert len(requests) == cfg.max_num_seqs == MAX_BURST
        assert 2 <= requests[0].max_tokens <= 4
    # before #14939 the retraction loop re-checks 1 token a request: some full batches run short of KV
    assert breaks(pol, plans, "kv-capacity") >= SAMPLE // 10
    assert breaks(get_policy("sglang-v1-retract-fixed"), plans, "kv-capacity") == 0


def test_a_pad_at_max_model_len_is_a_prefix_hit_one_token_short() -> None:
    pol = get_policy("vllm-adaptive")
    plans = sample(model_len_pad_plans(pol, config_space(pol)))
    edge = 0
    for plan in plans:
        cfg, (first,), (wait, later), _ = plan
        assert validates(pol, cfg) and cfg.enable_prefix_caching and 1 <= len(later) <= 3
        assert all(s.prompt == first.prompt == "tail" and s.n == first.n and s.prefix == "g0:all" for s in later)
        assert pol.loop.longest_prompt(cfg) - first.n >= cfg.max_model_len - 1 - cfg.num_speculative_tokens
        admitted = {"0"}
        for rec in run(pol, plan):
            for rid in set(rec.num_scheduled_tokens) - admitted:  # a copy's admission
                admitted.add(rid)
                hit = rec.computed_before[rid]
                edge += rec.num_tokens[rid] - hit == 1 and hit + 2 + cfg.num_speculative_tokens > cfg.max_model_len
    assert edge >= SAMPLE // 4  # a copy admitted one token short, where a padded verify passes max_model_len
    assert breaks(pol, plans, "model-len") == 0


def test_a_chunk_beside_decodes_fills_the_budget_they_leave() -> None:
    pol = get_policy("trtllm")
    plans = sample(chunk_beside_decode_plans(pol, config_space(pol)))
    beside = 0
    for plan in plans:
        cfg = plan[0]
        assert validates(pol, cfg) and cfg.num_speculative_tokens >= 1
        for rec in run(pol, plan):
            decodes = [r for r in rec.num_scheduled_tokens if r not in rec.prefill]
            beside += bool(decodes and rec.prefill)
    assert beside >= SAMPLE // 2
    assert breaks(pol, plans, "input-rows-cap") == 0
    # before #16101 a one-model decode was charged 1 for its 1 + k rows: a chunk then fills the rows it did not charge
    assert breaks(get_policy("trtllm-one-model-unreserved"), plans, "input-rows-cap") >= SAMPLE // 10



class DropsT(VllmAdaptive):
    """vLLM's policy without a positive T among its requirements (vLLM #44123 checked it only with speculation)."""

    name = "drops-t"

    def shared_requirements(self, c):  # type: ignore[no-untyped-def]
        return [r for r in super().shared_requirements(c) if r.name != "max_num_scheduled_tokens-positive"]

    def requirements(self, p):  # type: ignore[no-untyped-def]
        return [r for r in super().requirements(p) if r.name != "token-cap-positive"]


def test_some_plans_sit_on_one_seat_at_the_least_budget_or_past_a_dropped_edge() -> None:
    pol = get_policy("vllm-adaptive")
    plans = sample(aimed_plans(pol, rare_path_configs(pol), config_space(pol)))
    least = [cfg for cfg, *_ in plans if cfg.max_num_seqs == 1 and (cfg.max_num_batched_tokens == 1 or not validates(
        pol, cfg.replace(max_num_batched_tokens=cfg.max_num_batched_tokens - 1)))]
    assert len(least) >= SAMPLE // 16
    assert all((cfg.max_num_scheduled_tokens or 0) >= 0 for cfg, *_ in plans)  # it keeps every shared requirement
    drops = DropsT()
    past = sample(aimed_plans(drops, rare_path_configs(drops), config_space(drops)))
    assert sum((cfg.max_num_scheduled_tokens or 0) < 0 for cfg, *_ in past) >= SAMPLE // 10
