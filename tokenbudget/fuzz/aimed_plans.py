"""The start plans a user policy draws beside its configs (``machine.machine_class``: one
start in two, in three beside priority waves), each aimed at a path its engine's loop has or an edge its validation drops:
a full batch on page edges where its pool must hold more than one sequence
(``page_burst_plans``); on a one-pass loop that speculates, a chunk beside decodes
(``chunk_beside_decode_plans``) and, where the loop pads a short admission, a padded
admission at max_model_len (``model_len_pad_plans``); configs just past a shared requirement
its validation drops (``past_edge_configs``); and configs of the scales on one seat at the
least B the policy accepts for it (but room for one verify), where its loop's exit rule must
still let a token through."""
from __future__ import annotations

from hypothesis import strategies as st

from ..model import BudgetConfig, BudgetPolicy, methods
from .chunk_beside_decode_plans import chunk_beside_decode_plans
from .config_strategies import ConfigSpace, configs, least_budget
from .model_len_pad_plans import model_len_pad_plans
from .page_burst_plans import Plan, page_burst_plans
from .past_edge_configs import past_edge_configs
from .request_shapes import request_shapes


def aimed_plans(policy: BudgetPolicy, rare: dict[str, st.SearchStrategy[BudgetConfig]],
                space: ConfigSpace) -> st.SearchStrategy[Plan]:
    """The plans that apply to the policy (``rare``: its rare-path config shapes), each as
    likely; nothing when none applies."""
    plans = [page_burst_plans(policy, rare["page-edge"])] if "page-edge" in rare else []
    plans += [s for s in (chunk_beside_decode_plans(policy, space), model_len_pad_plans(policy, space))
              if not s.is_empty]
    past_edge = past_edge_configs(policy, space)
    least = configs(policy, space).map(lambda cfg: _least_budget_for_a_verify(policy, cfg.replace(max_num_seqs=1)))
    for shaped in ([] if past_edge.is_empty else [past_edge]) + [least]:
        plans.append(st.tuples(shaped, st.lists(request_shapes(), min_size=1, max_size=3)).map(
            lambda p: (p[0], p[1], (0, []), 0)))
    return st.one_of(*plans)


def _least_budget_for_a_verify(policy: BudgetPolicy, cfg: BudgetConfig) -> BudgetConfig:
    """cfg at the least B the policy accepts, but room for one verify and its draft slots
    (1 + k + d): below that a padded admission never fits, which vLLM's loop shows itself (F4)."""
    least = least_budget(policy, cfg)
    d = int(methods.draft_slots(policy.table, cfg.method, cfg.num_speculative_tokens, cfg.parallel_drafting)) \
        if cfg.method else 0
    return least.replace(max_num_batched_tokens=max(least.max_num_batched_tokens, 1 + cfg.num_speculative_tokens + d))
