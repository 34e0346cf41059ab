"""A full batch on page edges: a start that fills every seat with one page-edge prompt at
once, on a pool a few pages past what they hold, and runs their prefill and first decodes
before any other rule. Every decode then asks a new page in the same step, with a page or
three to spare: the retraction loop's own check decides who keeps one."""
from __future__ import annotations

from hypothesis import strategies as st

from ..model import BudgetConfig, BudgetPolicy
from ..model.config_edges import validates
from .request_shapes import BURST_MAX_TOKENS, MAX_BURST, RequestShape

# (config, first requests, (steps, later requests), idle passes): as ``machine_class`` starts a run
Plan = tuple[BudgetConfig, list[RequestShape], tuple[int, list[RequestShape]], int]
PASSES_PAST_PREFILL = 4  # idle steps after a page a step would have prefilled every seat: the first decodes


def page_burst_plans(policy: BudgetPolicy, page_edge: st.SearchStrategy[BudgetConfig]) -> st.SearchStrategy[Plan]:
    """Plans on configs of the ``page-edge`` shape (``config_strategies.rare_path_configs``),
    with ``MAX_BURST`` seats where the policy accepts them (else the config's own)."""
    return _plan(policy, page_edge)


@st.composite
def _plan(draw: st.DrawFn, policy: BudgetPolicy, page_edge: st.SearchStrategy[BudgetConfig]) -> Plan:
    """``MAX_BURST`` seats (B raised to their verifies where needed), as many copies of a
    prompt of one page, a token less, or two pages (``request_shapes.prompt_len``'s pages),
    a pool of the pages they hold and 1-3 more (at least the shape's own), then the idle
    steps that prefill them a page a step and decode past the page edge."""
    cfg = draw(page_edge)
    full = cfg.replace(max_num_seqs=MAX_BURST, max_num_batched_tokens=max(
        cfg.max_num_batched_tokens, MAX_BURST * (1 + cfg.num_speculative_tokens)))
    shape = RequestShape("pages", draw(st.sampled_from((0, 1, 2))), draw(st.integers(1, BURST_MAX_TOKENS)))
    held = shape.n // 2 % 4 + 1  # the pages a prompt of the shape holds once prefilled
    full = full.replace(num_kv_blocks=max(cfg.num_kv_blocks, MAX_BURST * held + draw(st.integers(1, 3))))
    cfg = full if validates(policy, full) else cfg
    copies = cfg.max_num_seqs
    return cfg, [shape] * copies, (0, []), copies * held + PASSES_PAST_PREFILL
