"""What a user policy is handed it may read, never write: a write to its params, budgets,
config, or (SGLang's decode hooks) the loop, a request or a list is a ``policy-error``
naming the attribute and the line of the write; state a policy keeps on itself is its own."""
from __future__ import annotations

import copy
import dataclasses
import pickle
import sys
from pathlib import Path

import pytest

from tokenbudget.model import BudgetConfig, BudgetParams, Budgets, get_policy
from tokenbudget.model.frozen_inputs import FrozenInputError, frozen
from tokenbudget.model.replay import replay_on_model
from tokenbudget.spec.corpus import corpus_paths
from tokenbudget.spec.trace import load_trace

sys.path.insert(0, str(Path(__file__).parent))  # frozen_input_policies, for get_policy
import frozen_input_policies  # noqa: E402

SOURCE = Path(frozen_input_policies.__file__)
VLLM_TRACE, SGLANG_TRACE = "seed-000-vllm-adaptive.json", "sglang-v1-retract-decode-oom.json"


def replay(trace: str, cls: str):  # type: ignore[no-untyped-def]
    path = next(p for p in corpus_paths() if p.name == trace)
    return replay_on_model(load_trace(path), get_policy(f"frozen_input_policies:{cls}"))


def write_line(cls: str) -> int:
    """The line of ``cls``'s write, marked ``# writes`` in the policies' source."""
    lines = SOURCE.read_text().splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(f"class {cls}("))
    return next(i for i in range(start, len(lines)) if lines[i].endswith("# writes")) + 1


@pytest.mark.parametrize("trace, cls, method, what", [
    (VLLM_TRACE, "ZeroDraftSlots", "grant", "draft_slots of its BudgetParams"),
    (VLLM_TRACE, "SetsDraftSlots", "grant", "draft_slots of its BudgetParams"),
    (VLLM_TRACE, "WritesVarsOfParams", "grant", "draft_slots of its BudgetParams"),
    (VLLM_TRACE, "DeletesBudget", "may_schedule", "input of its Budgets"),
    (VLLM_TRACE, "RaisesTokenBudget", "grant", "token of its Budgets"),
    (VLLM_TRACE, "WidensConfig", "validate", "max_num_batched_tokens of its BudgetConfig"),
    (SGLANG_TRACE, "ResetsRatio", "decode_fits", "new_token_ratio of its SglangLoop"),
    (SGLANG_TRACE, "RewindsRequest", "decode_target", "num_computed_tokens of its Request"),
    (SGLANG_TRACE, "PopsBatch", "decode_fits", "a list it was given"),
])
def test_a_write_to_an_input_is_a_policy_error_naming_it_and_its_line(trace, cls, method, what):
    result = replay(trace, cls)
    error = result.policy_error
    assert error is not None, f"{cls} ran with no policy-error: {result.errors}"
    assert f"{cls}.{method} ({SOURCE}:{write_line(cls)}) writes {what}," in error, error
    assert "\n" not in error


@pytest.mark.parametrize("trace, cls, base", [
    (VLLM_TRACE, "CountsItsCalls", "vllm-adaptive"),
    (VLLM_TRACE, "WritesItsOwnParams", "vllm-adaptive"),
    (SGLANG_TRACE, "OrdersItsOwnWay", "sglang-v1-retract"),
])
def test_state_of_its_own_is_the_policys_business(trace, cls, base):
    path = next(p for p in corpus_paths() if p.name == trace)
    own, builtin = replay(trace, cls), replay_on_model(load_trace(path), get_policy(base))
    assert own.policy_error is None and own.errors == ()
    assert [s.to_json() for s in own.steps] == [s.to_json() for s in builtin.steps]
    assert own.expected_violations == builtin.expected_violations


def test_a_read_only_twin_is_its_original_to_every_reader():
    policy = get_policy("vllm-adaptive")
    cfg = BudgetConfig(max_num_batched_tokens=64, max_num_seqs=4, num_speculative_tokens=2, method="ngram")
    params = policy.params(cfg)
    for original in (params, cfg, Budgets(5, None)):
        twin = frozen(original)
        assert isinstance(twin, type(original)) and twin == original and original == twin
        assert hash(twin) == hash(original) and repr(twin).endswith(repr(original).partition("(")[2])
        assert pickle.loads(pickle.dumps(twin)) == original and copy.deepcopy(twin) == original
        assert dataclasses.asdict(twin) == dataclasses.asdict(original)
        first = dataclasses.fields(original)[0].name
        assert dataclasses.replace(twin, **{first: 7}) == dataclasses.replace(original, **{first: 7})
        for write in (lambda: setattr(twin, first, 7), lambda: object.__setattr__(twin, first, 7),
                      lambda: delattr(twin, first), lambda: vars(twin).__setitem__(first, 7)):
            with pytest.raises(FrozenInputError, match=f"^{first} of its {type(original).__name__} is an input"):
                write()
        assert twin == original
    assert frozen(cfg).replace(max_num_seqs=2) == cfg.replace(max_num_seqs=2)


def test_a_builtin_policy_runs_unguarded_on_plain_inputs():
    """The guard and its read-only twins are a user policy's: a built-in's step pays nothing."""
    policy = get_policy("vllm-adaptive")
    assert "grant" not in vars(policy)
    from tokenbudget.model import scheduler_for
    sched = scheduler_for(BudgetConfig(max_num_batched_tokens=64, max_num_seqs=4), policy)
    assert type(sched.params) is BudgetParams
    user = scheduler_for(BudgetConfig(max_num_batched_tokens=64, max_num_seqs=4),
                         get_policy("frozen_input_policies:CountsItsCalls"))
    assert type(user.params) is not BudgetParams and isinstance(user.params, BudgetParams)
