"""A full batch on page edges: a start that fills every seat with one page-edge prompt at
once, on a pool a few pages past what they hold, and runs their prefill and first decodes
before any other rule. Every decode then asks a new page in the same step, with a page or
three to spare: the retraction loop's own check decides who keeps one. One such start in
two runs on small pages instead (``SMALL_PAGES``), where every decode's page check counts
a page: there the full batch outgrows a short max_model_len's least pool, and the
retraction loop's own check decides how many decodes keep their verify's slots."""
from __future__ import annotations

from hypothesis import strategies as st

from ..model import BudgetConfig, BudgetPolicy
from ..model.config_edges import largest_accepted, least_pool, validates
from ..spec.intlike import cdiv
from .config_strategies import MAX_POOL
from .request_shapes import BURST_MAX_TOKENS, MAX_BURST, RequestShape

# (config, first requests, (steps, later requests), idle passes): as ``machine_class`` starts a run
Plan = tuple[BudgetConfig, list[RequestShape], tuple[int, list[RequestShape]], int]
PASSES_PAST_PREFILL = 4  # idle steps after a page a step would have prefilled every seat: the first decodes
SMALL_PAGES = (1, 1, 2, 4)  # within a verify's reach 2 + 2k for every k >= 1; page 1 is SGLang's default
SMALL_MAX_TOKENS = 4  # out, on small pages: an admission reserves them all, and a full batch must fit


def page_burst_plans(policy: BudgetPolicy, page_edge: st.SearchStrategy[BudgetConfig]) -> st.SearchStrategy[Plan]:
    """Plans on configs of the ``page-edge`` shape (``config_strategies.rare_path_configs``),
    with ``MAX_BURST`` seats where the policy accepts them (else the config's own); one in
    two on small pages (``small_page_plans``)."""
    return st.one_of(_plan(policy, page_edge), small_page_plans(policy, page_edge))


def small_page_plans(policy: BudgetPolicy, page_edge: st.SearchStrategy[BudgetConfig]) -> st.SearchStrategy[Plan]:
    """Plans on a ``page-edge`` config moved to a page of ``SMALL_PAGES``, a short
    max_model_len and its least pool (``_small_pages``), with as many copies of a prompt of
    1 token or of one page as seats."""
    return _small_page_plan(policy, page_edge)


@st.composite
def _plan(draw: st.DrawFn, policy: BudgetPolicy, page_edge: st.SearchStrategy[BudgetConfig]) -> Plan:
    """``MAX_BURST`` seats (B raised to their verifies where needed), as many copies of a
    prompt of one page, a token less, or two pages (``request_shapes.prompt_len``'s pages),
    a pool of the pages they hold and 1-3 more (at least the shape's own), then the idle
    steps that prefill them a page a step and decode past the page edge."""
    cfg = draw(page_edge)
    full = _full(cfg)
    shape = RequestShape("pages", draw(st.sampled_from((0, 1, 2))), draw(st.integers(1, BURST_MAX_TOKENS)))
    held = shape.n // 2 % 4 + 1  # the pages a prompt of the shape holds once prefilled
    full = full.replace(num_kv_blocks=max(cfg.num_kv_blocks, MAX_BURST * held + draw(st.integers(1, 3))))
    cfg = full if validates(policy, full) else cfg
    copies = cfg.max_num_seqs
    return cfg, [shape] * copies, (0, []), copies * held + PASSES_PAST_PREFILL


@st.composite
def _small_page_plan(draw: st.DrawFn, policy: BudgetPolicy, page_edge: st.SearchStrategy[BudgetConfig]) -> Plan:
    """As many copies of a prompt of 1 token or of one page, 2 to ``SMALL_MAX_TOKENS`` out, as
    the seats of ``_small_pages`` (the drawn config where the policy refuses that), then the
    idle steps that prefill them and run their first decodes."""
    cfg, page = draw(page_edge), draw(st.sampled_from(SMALL_PAGES))
    one = draw(st.booleans())
    shape = RequestShape("one" if one else "pages", 0, draw(st.integers(2, SMALL_MAX_TOKENS)))
    cfg = _small_pages(draw, policy, cfg, page, (1 if one else page) + page + shape.max_tokens)
    copies = cfg.max_num_seqs
    return cfg, [shape] * copies, (0, []), copies + PASSES_PAST_PREFILL


def _small_pages(draw: st.DrawFn, policy: BudgetPolicy, cfg: BudgetConfig, page: int, admission: int) -> BudgetConfig:
    """cfg with ``MAX_BURST`` seats, B their verifies (at least), the page given, a pool that
    holds the seats' ``admission`` tokens each (an admission reserves its prompt, a page and
    its tokens out) and 0-2 pages more, and the longest max_model_len the policy accepts on
    it (its least where it accepts none on it: then that one's least pool). Every seat is
    admitted at once; their verifies then outgrow the pool. cfg itself where the policy
    refuses it."""
    pool = cdiv(MAX_BURST * admission, page) + draw(st.integers(0, 2))
    ample = _full(cfg).replace(block_size=page, num_kv_blocks=MAX_POOL)
    if not validates(policy, ample):
        return cfg
    least = -largest_accepted(lambda m: validates(policy, ample.replace(max_model_len=-m)), -ample.max_model_len, -1)
    small = ample.replace(max_model_len=least, num_kv_blocks=pool)
    if not validates(policy, small):
        return small.replace(num_kv_blocks=least_pool(policy, ample.replace(max_model_len=least)))
    return small.replace(max_model_len=largest_accepted(
        lambda m: validates(policy, small.replace(max_model_len=m)), least, pool * page))


def _full(cfg: BudgetConfig) -> BudgetConfig:
    """cfg with ``MAX_BURST`` seats and B raised to their verifies where needed."""
    return cfg.replace(max_num_seqs=MAX_BURST, max_num_batched_tokens=max(
        cfg.max_num_batched_tokens, MAX_BURST * (1 + cfg.num_speculative_tokens)))
