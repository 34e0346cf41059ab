"""The whatif simulator over the reference scheduler: effective budgets, k=0, the clock."""
from __future__ import annotations

import pytest

from tokenbudget.model import BudgetConfig, get_policy
from tokenbudget.whatif import metrics
from tokenbudget.whatif.cost_fitted import FittedCost
from tokenbudget.whatif.effective_budget import budgets_by_policy, effective_budget
from tokenbudget.whatif.simulator import SimulationError, simulate
from tokenbudget.whatif.step_shape import CACHED_KEYS, FEATURES, StepShape
from tokenbudget.whatif.workload import Lengths, RequestSpec, Workload, WorkloadError, synthetic

DSPARK = BudgetConfig(max_num_batched_tokens=8192, max_num_seqs=1024, num_speculative_tokens=7, method="dspark",
                      engine_version="0.32", max_model_len=16384, num_kv_blocks=2**20)


def per_token(step_s: float = 0.01, token_s: float = 1e-5) -> FittedCost:
    """A step costs ``step_s`` plus ``token_s`` per prefill or verify token."""
    return FittedCost({"per_step_s": step_s, "per_prefill_tokens_s": token_s, "per_verify_tokens_s": token_s,
                       "per_token_context_s": 0.0, "per_num_seqs_s": 0.0, "per_kv_tokens_s": 0.0,
                       "per_chunk_square_s": 0.0, "per_sampled_seqs_s": 0.0,
                       "per_sampling_steps_s": 0.0, "per_pairs_past_cached_keys_s": 0.0}, {"what": "test"})


def test_the_vllm_rules_effective_budgets_are_the_changes_numbers():
    budgets = budgets_by_policy(DSPARK, {n: get_policy(n) for n in ("vllm-static", "vllm-adaptive")},
                                (1, 32, 128, 1024))
    assert budgets["vllm-adaptive"]["budget"] == {"1": 8186, "32": 8000, "128": 7424, "1024": 2048}
    assert budgets["vllm-static"]["budget"] == {"1": 2048, "32": 2048, "128": 2048, "1024": 2048}


def test_a_policy_that_refuses_the_method_is_reported_not_raised():
    budgets = budgets_by_policy(DSPARK, {"trtllm": get_policy("trtllm")}, (1,))
    assert "dspark" in budgets["trtllm"]["refused"]


def test_without_drafts_the_budgets_agree():
    cfg = DSPARK.replace(num_speculative_tokens=0, method=None)
    assert {effective_budget(cfg, get_policy(n), 128) for n in ("vllm-static", "vllm-adaptive")} == {8192}


def _load(conc: int, prompt: int = 5000, n: int = 12, seed: int = 3) -> Workload:
    return synthetic(n, conc, None, Lengths(prompt, prompt + 2000), Lengths(20, 80), (0.9, 0.7, 0.5), seed)


@pytest.mark.parametrize("conc", [1, 4])
def test_with_k_0_every_policy_gives_the_same_latencies(conc):
    cfg = DSPARK.replace(num_speculative_tokens=0, method=None)
    runs = [simulate(cfg, get_policy(n), _load(conc), per_token()) for n in ("vllm-static", "vllm-adaptive")]
    summaries = [metrics.summarise(r) | {"policy": None} for r in runs]
    assert summaries[0] == summaries[1]
    assert summaries[0]["ttft_s"]["p50"] > 0


def test_the_old_rule_takes_more_prefill_steps_for_a_long_prompt():
    one = Workload((RequestSpec("a", 0.0, 8000, 4),), 1, (0.5,), 0)
    old, new = (simulate(DSPARK, get_policy(n), one, per_token(0.01, 0.0)) for n in ("vllm-static", "vllm-adaptive"))
    assert metrics.ttfts(old)[0] == pytest.approx(4 * 0.01)  # ceil(8000 / 2048) steps
    assert metrics.ttfts(new)[0] == pytest.approx(1 * 0.01)  # 8000 <= 8186


def test_ttft_counts_from_when_the_client_sent_the_request():
    load = Workload((RequestSpec("a", 0.0, 100, 2), RequestSpec("b", 0.0, 100, 2)), 1, (0.0,), 0)
    run = simulate(DSPARK, get_policy("vllm-adaptive"), load, per_token(0.01, 0.0))
    times = run.requests
    assert times["b"].sent_s == pytest.approx(times["a"].finish_s)  # sent when a's slot freed
    assert list(metrics.ttfts(run)) == pytest.approx([0.01, 0.01])


def test_a_poisson_arrival_waits_for_the_step_boundary():
    load = Workload((RequestSpec("a", 0.0, 100, 50), RequestSpec("b", 0.015, 100, 2)), None, (0.0,), 0)
    run = simulate(DSPARK, get_policy("vllm-adaptive"), load, per_token(0.01, 0.0))
    b = run.requests["b"]
    assert b.sent_s == 0.015
    assert b.first_token_s == pytest.approx(0.03)  # joins at the step ending 0.02, its prefill ends at 0.03


def test_the_acceptance_draws_shorten_the_decode():
    load = Workload((RequestSpec("a", 0.0, 100, 64),), 1, (1.0,), 0)
    none = Workload((RequestSpec("a", 0.0, 100, 64),), 1, (0.0,), 0)
    full, zero = (simulate(DSPARK, get_policy("vllm-adaptive"), w, per_token()) for w in (load, none))
    assert len(full.step_end_s) == 1 + 8  # the prefill's token, then 1 + 7 tokens a step
    assert len(zero.step_end_s) == 1 + 63


def test_a_prompt_past_max_model_len_is_refused():
    load = Workload((RequestSpec("a", 0.0, 20000, 4),), 1, (0.5,), 0)
    with pytest.raises(WorkloadError, match="max_model_len"):
        simulate(DSPARK, get_policy("vllm-adaptive"), load, per_token())


def test_lengths_parse_and_refuse():
    assert Lengths.parse("7", "--x") == Lengths(7, 7)
    assert Lengths.parse("3:9", "--x") == Lengths(3, 9)
    for bad in ("0", "9:3", "a", "1:2:3", ""):
        with pytest.raises(WorkloadError, match="--x"):
            Lengths.parse(bad, "--x")


def test_step_shape_counts_causal_context():
    load = Workload((RequestSpec("a", 0.0, 10, 3),), 1, (0.0,), 0)
    shapes = []

    class Recording(FittedCost):
        def step_seconds(self, shape):
            shapes.append(shape)
            return 0.01

    simulate(DSPARK.replace(num_speculative_tokens=0, method=None), get_policy("vllm-adaptive"), load,
             Recording(per_token().coefficients, {}))
    assert shapes[0] == StepShape(10, 0, 55, 1, 0, 10, 100, 1, 0)
    assert shapes[1] == StepShape(0, 1, 11, 1, 0, 11, 1, 1, 0)


def test_step_shape_counts_the_pairs_past_the_cached_keys():
    prompt = CACHED_KEYS + 76
    load = Workload((RequestSpec("a", 0.0, prompt, 2),), 1, (0.0,), 0)
    shapes = []

    class Recording(FittedCost):
        def step_seconds(self, shape):
            shapes.append(shape)
            return 0.01

    cfg = DSPARK.replace(num_speculative_tokens=0, method=None, max_num_batched_tokens=600, max_num_seqs=8)
    simulate(cfg, get_policy("vllm-adaptive"), load, Recording(per_token().coefficients, {}))
    first, second, decode = shapes
    assert (first.prefill_tokens, first.pairs_past_cached_keys) == (600, 0)  # 600 keys: all cached
    assert (second.prefill_tokens, second.pairs_past_cached_keys) == (prompt - 600, (prompt - 600) * 76)
    assert decode.pairs_past_cached_keys == 77  # one query row over prompt + 1 keys
    sampling = FEATURES.index("sampling_steps")
    assert [s.features()[sampling] for s in shapes] == [0, 1, 1]  # the last chunk samples, its first does not


def test_a_stalling_policy_is_an_error_not_a_hang():
    class Starve(type(get_policy("vllm-adaptive"))):
        name = "starve"

        def may_schedule(self, p, b):
            return False

    load = Workload((RequestSpec("a", 0.0, 10, 3),), 1, (0.0,), 0)
    with pytest.raises(SimulationError, match="stalls"):
        simulate(DSPARK, Starve(), load, per_token())
