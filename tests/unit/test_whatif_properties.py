"""Properties of whatif's predictions, over drawn configs, prompts and cost models."""
from __future__ import annotations

from pathlib import Path

from hypothesis import given, strategies as st

from tokenbudget.model import BudgetConfig, get_policy
from tokenbudget.whatif import metrics
from tokenbudget.whatif.cost_fitted import TERMS, FittedCost
from tokenbudget.whatif.cost_file import load
from tokenbudget.whatif.effective_budget import effective_budget
from tokenbudget.whatif.simulator import simulate
from tokenbudget.whatif.workload import Lengths, RequestSpec, Workload, synthetic

MAX_MODEL_LEN = 1 << 15
# A fitted cost with no KV-read, squared-grant or past-the-cache term: reading each sequence's
# KV once per step, masking a full rectangle, or a larger chunk's rectangle reaching further past
# the cached keys makes a larger first chunk of the same number of steps cost more, a real
# (small) cost these laws leave out.
NO_EXTRA = ("per_kv_tokens_s", "per_chunk_square_s", "per_pairs_past_cached_keys_s")
coefficients = st.tuples(*[st.floats(0, 1e-3) for _ in TERMS]).map(
    lambda c: FittedCost({t: 0.0 if t in NO_EXTRA else v + (1e-4 if t == "per_step_s" else 0.0)
                          for t, v in zip(TERMS, c)}, {"what": "drawn"}))
with_kv = st.tuples(*[st.floats(0, 1e-3) for _ in TERMS]).map(
    lambda c: FittedCost(dict(zip(TERMS, c)), {"what": "drawn"}))
costs = st.one_of(with_kv, st.just(load(Path("kimi-k2-h100x8"))))
policies = st.sampled_from(["vllm-static", "vllm-adaptive"])


def config(budget: int, seqs: int = 8, k: int = 7) -> BudgetConfig:
    return BudgetConfig(max_num_batched_tokens=budget, max_num_seqs=seqs, num_speculative_tokens=k,
                        method="dspark" if k else None, engine_version="0.32", max_model_len=MAX_MODEL_LEN,
                        num_kv_blocks=1 << 16)


def lone_ttft(cfg: BudgetConfig, policy: str, prompt: int, cost) -> float:
    lone = Workload((RequestSpec("a", 0.0, prompt, 2),), 1, (0.5,), 0)
    return float(metrics.ttfts(simulate(cfg, get_policy(policy), lone, cost))[0])


@given(st.integers(64, 4096), st.integers(0, 4096), st.integers(1, MAX_MODEL_LEN - 1), policies, coefficients)
def test_a_larger_budget_never_raises_a_lone_requests_ttft(budget, more, prompt, policy, cost):
    """Under a fitted cost without those two terms (affine in the other features: a prompt's
    causal context pairs sum the same however it is chunked)."""
    small, large = lone_ttft(config(budget), policy, prompt, cost), lone_ttft(config(budget + more), policy, prompt, cost)
    assert large <= small * (1 + 1e-12)


@given(st.integers(64, 4096), st.integers(1, 40), st.integers(1, 16), coefficients)
def test_the_ttft_ratio_of_two_rules_lies_between_their_budget_ratio_and_1(budget, chunks, seqs, cost):
    """For a prompt of whole old-rule steps (else the last partial step can cost the old
    rule one more step than its budget ratio says), under a fitted cost as above."""
    cfg = config(budget + 6 * seqs, seqs)
    old_budget = effective_budget(cfg, get_policy("vllm-static"), 1)
    new_budget = effective_budget(cfg, get_policy("vllm-adaptive"), 1)
    prompt = min(chunks * old_budget, (MAX_MODEL_LEN - 1) // old_budget * old_budget)
    ratio = lone_ttft(cfg, "vllm-adaptive", prompt, cost) / lone_ttft(cfg, "vllm-static", prompt, cost)
    assert old_budget / new_budget * (1 - 1e-12) <= ratio <= 1 + 1e-12


@given(st.integers(0, 2**32), st.integers(1, 6), st.sampled_from([None, 0.5, 50.0]), policies, st.integers(0, 7),
       costs)
def test_the_same_seed_gives_the_same_numbers(seed, conc, rate, policy, k, cost):
    def once() -> dict:
        load = synthetic(8, conc, rate, Lengths(1, 3000), Lengths(1, 40), (0.9, 0.6, 0.3), seed)
        return metrics.summarise(simulate(config(2048, k=k), get_policy(policy), load, cost))
    assert once() == once()
