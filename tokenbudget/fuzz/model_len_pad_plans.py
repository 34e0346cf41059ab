"""A padded admission at max_model_len: a start where a prefix hit leaves a waiting request
one token short of its prompt, within a verify of max_model_len. A prompt within k + 1 of
max_model_len (``request_shapes``'s tail, n <= k) prefills in one step and is cached; 1 to 3
copies of it arrive 1-4 steps later, each hitting all of it but its last token (block size 1,
2 or 4, so the hit often ends there). A loop that pads a 1-token admission to 1 + k must then
ask whether the padded drafts still fit under max_model_len."""
from __future__ import annotations

from hypothesis import strategies as st

from ..model import BudgetConfig, BudgetPolicy, OnePassLoop, methods
from ..model.config_edges import validates
from .config_strategies import MAX_POOL, RARE_MAX_SEQS, RARE_MODEL_LEN, ConfigSpace, least_budget
from .page_burst_plans import Plan
from .request_shapes import RequestShape

MAX_PAD_K = 4  # k of these configs: small, so a tail prompt's n (0..k) often lands within k + 1


def model_len_pad_plans(policy: BudgetPolicy, space: ConfigSpace) -> st.SearchStrategy[Plan]:
    """Plans of a cached tail prompt, then copies that hit all of it but a token; nothing
    unless the policy's loop pads a short admission and speculates."""
    loop = policy.loop
    speculative = tuple(m for m in space.methods if m is not None)
    if not (issubclass(loop, OnePassLoop) and loop.pads_short_admissions and speculative):
        return st.nothing()
    return _plan(policy, space, speculative).filter(lambda plan: validates(policy, plan[0]))


@st.composite
def _plan(draw: st.DrawFn, policy: BudgetPolicy, space: ConfigSpace, speculative: tuple[str, ...]) -> Plan:
    """``_config``, a tail prompt (n 0..k: within k + 1 of max_model_len) shared whole by its
    prefix group, then 1-4 idle steps and 1-3 copies of it."""
    cfg = _config(draw, policy, space, speculative)
    k = cfg.num_speculative_tokens
    n = draw(st.integers(0, k))
    first = RequestShape("tail", n, draw(st.integers(1, 8)), prefix="g0:all")
    later = [RequestShape("tail", n, draw(st.integers(1, 8)), prefix="g0:all")
             for _ in range(draw(st.integers(1, 3)))]
    return cfg, [first], (draw(st.integers(1, 4)), later), 0


def _config(draw: st.DrawFn, policy: BudgetPolicy, space: ConfigSpace, speculative: tuple[str, ...]) -> BudgetConfig:
    """Speculation with k up to ``MAX_PAD_K``, 1 to ``RARE_MAX_SEQS`` seats, prefix caching on,
    blocks of 1, 2 or 4, an ample pool, and B room for a whole prompt beside the draft slots
    and for a padded admission (at least the least the policy accepts)."""
    method = draw(st.sampled_from(speculative))
    k = draw(st.integers(1, max(1, min(MAX_PAD_K, space.max_k))))
    d = int(methods.draft_slots(policy.table, method, k, False))
    model_len = max(space.min_model_len, draw(st.integers(*RARE_MODEL_LEN)))
    cfg = BudgetConfig(max_num_batched_tokens=model_len + d + 1 + k,
                       max_num_seqs=draw(st.integers(1, min(RARE_MAX_SEQS, space.max_seqs))),
                       num_speculative_tokens=k, method=method, block_size=draw(st.sampled_from((1, 2, 4))),
                       num_kv_blocks=MAX_POOL, max_model_len=model_len, enable_prefix_caching=True)
    least = least_budget(policy, cfg).max_num_batched_tokens  # cfg itself where the policy refuses it
    return cfg.replace(max_num_batched_tokens=max(least, draw(st.integers(model_len + d, model_len + d + 1 + k))))
