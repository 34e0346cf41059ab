"""The SGLang divergence explanations check their mechanism on the model's state (no SGLang
needed): SGLang's prefill reservation refuses what the model admits only where its page and
max_new charges make the difference."""
from __future__ import annotations

from tokenbudget.harness.sglang.known import KNOWN, model_before, sglang_refuses
from tokenbudget.model import BudgetConfig, get_policy
from tokenbudget.model.target import ModelTarget
from tokenbudget.spec.trace import AddOp, StepOp, Trace

CONFIG = {"max_num_batched_tokens": 64, "max_num_seqs": 4, "block_size": 1, "max_model_len": 16,
          "num_speculative_tokens": 1, "method": "eagle3", "enable_prefix_caching": False, "num_kv_blocks": 22}


def trace(prompt: int, max_tokens: int) -> Trace:
    return Trace(policy="sglang-0.5.23", config=CONFIG,
                 ops=(AddOp(id="0", prompt_len=4, max_tokens=4),
                      AddOp(id="1", prompt_len=prompt, max_tokens=max_tokens), StepOp({})))


def model_grants(t: Trace) -> dict[str, int]:
    target = ModelTarget(BudgetConfig.from_dict(t.config), get_policy(t.policy))
    for op in t.ops[:2]:
        assert isinstance(op, AddOp)
        target.add(op)
    return dict(target.step({})[0].num_scheduled_tokens)


def test_a_request_within_the_models_budget_but_not_sglangs_is_refused_by_sglangs_rule() -> None:
    # 22 tokens of KV: the model charges 4 + 4 for request 0 and admits 6 + 6 < 14; SGLang
    # charges 4 + 1 + 4 and asks 6 + 6 + 1 < 13, which fails.
    t = trace(6, 6)
    assert model_grants(t) == {"0": 4, "1": 6}
    loop = model_before(t, 0)
    assert loop is not None
    assert sglang_refuses(loop, {"0": 4, "1": 6}, {"0": 4})
    assert not sglang_refuses(loop, {"0": 4, "1": 6}, {"0": 4, "1": 6})  # no difference to explain


def test_a_request_both_budgets_admit_is_not_explained_by_the_reservation() -> None:
    t = trace(5, 5)  # 5 + 5 + 1 < 13: SGLang admits it too
    assert model_grants(t) == {"0": 4, "1": 5}
    loop = model_before(t, 0)
    assert loop is not None and not sglang_refuses(loop, {"0": 4, "1": 5}, {"0": 4})


def test_every_explanation_names_its_spec_entry() -> None:
    assert {k.id for k in KNOWN} == {"sglang-grant-clip", "sglang-prefill-reservation", "sglang-chunk-page-floor",
                                     "sglang-abort-latch"}
    assert all(k.spec.startswith("SPEC.md §10") and k.kind in ("simplification", "model-gap") for k in KNOWN)
