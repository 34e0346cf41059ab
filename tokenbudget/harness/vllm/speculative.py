"""Our translation of a config's speculative decoding into a vLLM ``SpeculativeConfig``, per
modelled version (SPEC.md §13.2). No draft model is loaded: the config is built with
``method="ngram"`` (no draft model needed), then ``method`` is set to the requested one, and
parallel drafting as that version takes it: a knob of its own (0.32, 0.33) or a consequence
of the method (0.34: DFlash and DSpark only)."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ...model import methods
from ...model.vllm.versions import VLLM_VERSIONS, VllmVersion
from ..unavailable import EngineUnavailable

if TYPE_CHECKING:
    from vllm.config import SpeculativeConfig

    from ...model.config import BudgetConfig


class TranslationRefused(EngineUnavailable):
    """This vLLM cannot run a config tokenbudget translates for it (never the user's bad input)."""


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
        raise TranslationRefused(untranslatable(cfg.method, cfg.parallel_drafting, rules))
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


def untranslatable(method: str, parallel: bool, rules: VllmVersion) -> str:
    """The one line for a method (serial or parallel) that vLLM ``rules.version`` lacks."""
    def has(row: VllmVersion) -> bool:
        entry = methods.TABLES[row.table].get(method)
        return entry is not None and (not parallel or entry.parallel_draft_slots is not None)

    what = f"parallel drafting with method {method!r}" if parallel else f"the speculative method {method!r}"
    others = [v for v, row in VLLM_VERSIONS.items() if has(row)]
    where = f"run it on vLLM {' or '.join(others)}" if others else "choose another method"
    fix = f"{where}, or set parallel_drafting=false" if parallel else where
    return (f"vLLM {rules.release.rsplit('.', 1)[0]} has no {what} (its SpeculativeConfig refuses it), so tokenbudget "
            f"cannot translate this config for it; {fix}")
