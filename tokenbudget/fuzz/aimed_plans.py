"""The start plans a user policy draws beside its configs (``machine.machine_class``: one
start in five), each aimed at a path its engine's loop has: a full batch on page edges
where its pool must hold more than one sequence (``page_burst_plans``); on a one-pass loop
that speculates, a chunk beside decodes (``chunk_beside_decode_plans``) and, where the loop
pads a short admission, a padded admission at max_model_len (``model_len_pad_plans``)."""
from __future__ import annotations

from hypothesis import strategies as st

from ..model import BudgetConfig, BudgetPolicy
from .chunk_beside_decode_plans import chunk_beside_decode_plans
from .config_strategies import ConfigSpace
from .model_len_pad_plans import model_len_pad_plans
from .page_burst_plans import Plan, page_burst_plans


def aimed_plans(policy: BudgetPolicy, rare: dict[str, st.SearchStrategy[BudgetConfig]],
                space: ConfigSpace) -> st.SearchStrategy[Plan]:
    """The plans that apply to the policy (``rare``: its rare-path config shapes), each as
    likely; nothing when none applies."""
    plans = [page_burst_plans(policy, rare["page-edge"])] if "page-edge" in rare else []
    plans += [s for s in (chunk_beside_decode_plans(policy, space), model_len_pad_plans(policy, space))
              if not s.is_empty]
    return st.one_of(*plans) if plans else st.nothing()
