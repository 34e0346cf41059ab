"""Our translation of a config's speculative decoding into a vLLM ``SpeculativeConfig``, per
modelled version (SPEC.md §12.2). No draft model is loaded: the config is built with
``method="ngram"`` (no draft model needed), then ``method`` is set to the requested one, and
parallel drafting as that version takes it: a knob of its own (0.32, 0.33) or a consequence
of the method (0.34: DFlash and DSpark only)."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ...model import methods
from ...model.vllm.versions import VllmVersion

if TYPE_CHECKING:
    from vllm.config import SpeculativeConfig

    from ...model.config import BudgetConfig


class TranslationRefused(ValueError):
    """The vLLM release refuses tokenbudget's translation of a config (not the user's input)."""


def construction_kwargs(cfg: BudgetConfig, rules: VllmVersion) -> dict[str, Any]:
    """The keyword arguments of the ngram ``SpeculativeConfig`` the method is set on."""
    kwargs: dict[str, Any] = {"method": "ngram", "num_speculative_tokens": cfg.num_speculative_tokens}
    if rules.parallel_drafting_knob:
        kwargs["parallel_drafting"] = cfg.parallel_drafting
    return kwargs


def set_method(spec_config: SpeculativeConfig, cfg: BudgetConfig, rules: VllmVersion) -> None:
    """Make ``spec_config`` the config of ``cfg.method``, drafting in parallel as ``cfg`` asks
    and ``rules``' version allows; TranslationRefused when that version has no such method."""
    assert cfg.method is not None  # a speculative config names its method
    row = methods.TABLES[rules.table].get(cfg.method)
    if row is None or (cfg.parallel_drafting and row.parallel_draft_slots is None):
        parallel = " with parallel drafting" if row is not None else ""
        raise TranslationRefused(f"vLLM {rules.version} has no speculative method {cfg.method!r}{parallel}")
    spec_config.method = cfg.method
    if rules.parallel_drafting_knob:
        spec_config.parallel_drafting = cfg.parallel_drafting or row.parallel_only


def rederive(vllm_config: Any) -> None:
    """Re-run what ``VllmConfig.__post_init__`` derived from the ngram config, now that the
    method is set: the token cap and its check, and (0.34, where it is a field set once) the
    tokens a block's prefix-cache key covers (vllm/config/vllm.py:2261 (vLLM 0.34.0))."""
    vllm_config._set_max_num_scheduled_tokens()
    if "num_hash_lookahead_tokens" in getattr(vllm_config, "__dataclass_fields__", {}):
        vllm_config.num_hash_lookahead_tokens = vllm_config._resolve_num_hash_lookahead_tokens()
