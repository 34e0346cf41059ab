"""Configs just past a shared requirement a policy may drop or gate (``model.config``'s
droppable ones): a token budget T below 0, a long-prefill threshold below 0 or past
max_model_len, a pool a block short of one sequence. A policy that keeps every requirement
accepts none of them and draws nothing here; one whose validation lets such a config
through is fuzzed on it, with speculation on or off as its validation allows."""
from __future__ import annotations

from typing import Callable

from hypothesis import strategies as st

from ..model import BudgetConfig, BudgetPolicy, ConfigError
from ..model.config_edges import validates
from ..spec.intlike import cdiv
from .config_strategies import ConfigSpace, candidate_configs

Edge = Callable[[BudgetConfig, int], BudgetConfig]
EDGES: dict[str, Edge] = {  # a shared requirement's name: the config past it (n: 0 or 1, how much further)
    "max_num_scheduled_tokens-positive": lambda cfg, n: cfg.replace(max_num_scheduled_tokens=-1 - n),
    "long-prefill-threshold-nonnegative": lambda cfg, n: cfg.replace(long_prefill_token_threshold=-1 - n),
    "long-prefill-threshold-within-model-len": lambda cfg, n: cfg.replace(
        long_prefill_token_threshold=cfg.max_model_len + 1 + n),
    "kv-pool-holds-one-sequence": lambda cfg, n: cfg.replace(
        num_kv_blocks=max(1, cdiv(cfg.max_model_len, cfg.block_size) - 1 - n)),
}
PROBE = BudgetConfig(max_num_batched_tokens=4096, max_num_seqs=4, max_model_len=4096)


def past_edge_configs(policy: BudgetPolicy, space: ConfigSpace) -> st.SearchStrategy[BudgetConfig]:
    """Configs of the scales moved past an edge the policy accepts past on a roomy probe,
    speculation set as on that probe; nothing when it accepts past none."""
    speculative = [m for m in space.methods if m is not None]
    probes = [PROBE] if None in space.methods else []
    if speculative:
        probes.append(PROBE.replace(method=speculative[0], num_speculative_tokens=1))
    open_edges = [(edge, probe.method is not None) for edge in EDGES for probe in probes
                  if any(_accepts(policy, EDGES[edge], probe, n) for n in (0, 1))]
    if not open_edges:
        return st.nothing()
    return _past_edge(candidate_configs(policy, space), tuple(open_edges), tuple(speculative)).filter(
        lambda cfg: validates(policy, cfg))


def _accepts(policy: BudgetPolicy, edge: Edge, cfg: BudgetConfig, n: int) -> bool:
    try:
        return validates(policy, edge(cfg, n))
    except ConfigError:  # past a structural requirement too: BudgetConfig refuses it
        return False


@st.composite
def _past_edge(draw: st.DrawFn, scales: st.SearchStrategy[BudgetConfig], open_edges: tuple[tuple[str, bool], ...],
               speculative: tuple[str, ...]) -> BudgetConfig:
    """A config of the scales, speculation as the edge's probe had it, moved past the edge."""
    edge, spec_on = draw(st.sampled_from(open_edges))
    cfg = draw(scales)
    if not spec_on:
        cfg = cfg.replace(method=None, num_speculative_tokens=0, parallel_drafting=False)
    elif cfg.method is None:
        cfg = cfg.replace(method=draw(st.sampled_from(speculative)), num_speculative_tokens=1)
    try:
        return EDGES[edge](cfg, draw(st.integers(0, 1)))
    except ConfigError:
        return cfg  # the scale config itself: past this edge, BudgetConfig refuses it
