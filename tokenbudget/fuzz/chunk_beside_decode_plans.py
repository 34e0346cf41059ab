"""A chunk beside decodes: a start where 1-3 short prompts prefill, then decode while a
long prompt arrives and chunks into the budget they leave. A loop that charges each decode
less than the rows it runs (or sizes the chunk past what it charged) then runs more rows
than B in that step: the shape aims at ``input-rows-cap`` on the loop's own chunking."""
from __future__ import annotations

from hypothesis import strategies as st

from ..model import BudgetConfig, BudgetPolicy, OnePassLoop, methods
from ..model.config_edges import validates
from .config_strategies import MAX_POOL, RARE_MAX_SEQS, RARE_MODEL_LEN, ConfigSpace, least_budget
from .page_burst_plans import Plan
from .request_shapes import RequestShape

MAX_CHUNK_K = 4
DECODE_TOKENS = (8, 16)  # out, for the short prompts: they still decode when the long prompt chunks


def chunk_beside_decode_plans(policy: BudgetPolicy, space: ConfigSpace) -> st.SearchStrategy[Plan]:
    """Plans of short prompts, then a long one after their prefill; nothing unless the
    policy's loop runs decodes and prefill chunks in one pass and speculates."""
    speculative = tuple(m for m in space.methods if m is not None)
    if not (issubclass(policy.loop, OnePassLoop) and speculative):
        return st.nothing()
    return _plan(policy, space, speculative).filter(lambda plan: validates(policy, plan[0]))


@st.composite
def _plan(draw: st.DrawFn, policy: BudgetPolicy, space: ConfigSpace, speculative: tuple[str, ...]) -> Plan:
    """``_config``; 1 to its seats - 1 prompts of 1 or k + 1 tokens, a few decodes out;
    1-2 idle steps (their prefill); then 1-3 prompts of about a chunk or more (``budget``,
    ``long``) or of any length up to 4 chunks (``any``), admitted together into what is left."""
    cfg = _config(draw, policy, space, speculative)
    short = RequestShape(draw(st.sampled_from(("one", "k+1"))), 0, draw(st.integers(*DECODE_TOKENS)))
    first = [short] * draw(st.integers(1, max(1, cfg.max_num_seqs - 1)))
    later = [RequestShape(draw(st.sampled_from(("budget", "long", "any"))), draw(st.integers(0, 300)),
                          draw(st.integers(1, 8))) for _ in range(draw(st.integers(1, 3)))]
    return cfg, first, (draw(st.integers(1, 2)), later), 0


def _config(draw: st.DrawFn, policy: BudgetPolicy, space: ConfigSpace, speculative: tuple[str, ...]) -> BudgetConfig:
    """Speculation with k up to ``MAX_CHUNK_K`` (drafting in parallel where the policy and the
    method have it: d > 0, draft slots a chunk's rows count too), 2 to ``RARE_MAX_SEQS`` seats,
    blocks of 1, 2 or 4 (a chunk aligned to a block fills the budget nearly), an ample pool (no run ends short of
    KV first), and B from the least the policy accepts up to a few decodes' verifies."""
    method = draw(st.sampled_from(speculative))
    k = draw(st.integers(1, max(1, min(MAX_CHUNK_K, space.max_k))))
    parallel = space.parallel_drafting and methods.TABLES[policy.table][method].parallel_draft_slots is not None
    d = int(methods.draft_slots(policy.table, method, k, parallel))
    seqs = draw(st.integers(min(2, space.max_seqs), min(RARE_MAX_SEQS, space.max_seqs)))
    model_len = max(space.min_model_len, draw(st.integers(*RARE_MODEL_LEN)))
    cfg = BudgetConfig(max_num_batched_tokens=model_len, max_num_seqs=seqs, num_speculative_tokens=k, method=method,
                       parallel_drafting=parallel, block_size=draw(st.sampled_from((1, 2, 4))), num_kv_blocks=MAX_POOL,
                       max_model_len=model_len,
                       enable_prefix_caching=draw(st.booleans()))
    least = least_budget(policy, cfg).max_num_batched_tokens  # cfg itself where the policy refuses it
    return cfg.replace(max_num_batched_tokens=draw(st.integers(least, max(least, 2 * seqs * (1 + k + d)))))
