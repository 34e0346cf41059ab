"""BudgetConfig: the scheduler knobs a budget policy reads, validated on construction."""
from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from typing import Any, Callable, Mapping

from ..spec.intlike import BoolLike, and_, not_
from .methods import ALL_METHODS


class ConfigError(ValueError):
    """A configuration that cannot be served; the message names the knob to change."""


class PolicyNotRunnable(ConfigError):
    """A target that cannot run the policy under any config (a real engine whose own
    accounting is another policy's); the message names the target to use instead."""


SCHEDULING_POLICIES = ("fcfs", "priority")

# The most each knob may be: beyond what any real deployment uses, so that a typo (an extra
# zero run, 10^30) is refused up front, naming the knob, instead of sizing a pool or a buffer.
LIMITS: dict[str, int] = {
    "max_num_batched_tokens": 2**24,
    "max_num_scheduled_tokens": 2**24,
    "max_num_seqs": 2**16,
    "num_speculative_tokens": 128,
    "block_size": 2**16,
    "num_kv_blocks": 2**31,
    "max_model_len": 2**26,
    "long_prefill_token_threshold": 2**26,
}


@dataclass(frozen=True)
class Requirement:
    """One acceptance condition of a validation, written once over IntLike.

    ``holds`` is a bool for a concrete config and a z3 term for a symbolic one (the
    prover's); ``message()`` is the ConfigError text, naming the knob to change, and is
    only called on concrete values. ``scope`` marks a refusal of a feature the engine does
    not have (FastDeploy's priority scheduling, say): a statement about the engine, not a
    budget-safety claim, so ``config-complete`` does not ask whether it over-rejects.
    """

    holds: BoolLike
    message: Callable[[], str]
    scope: bool = False
    name: str = ""  # names a shared requirement, so that a policy can drop it (``BudgetPolicy.shared_requirements``)


def config_requirements(c: Any) -> list[Requirement]:
    """What every engine asks of a config, in the order BudgetConfig checks it.

    ``c`` has BudgetConfig's field names: a BudgetConfig, or the prover's symbolic config
    whose numeric fields are z3 terms and whose categorical fields (method,
    scheduling_policy, parallel_drafting) are Python values. Field types are checked by
    BudgetConfig itself, before these.
    """
    k, method = c.num_speculative_tokens, c.method
    out = [
        Requirement(getattr(c, name) >= 1, lambda name=name: f"{name} must be at least 1, got {getattr(c, name)}",
                    name=f"{name}-positive")
        for name in ("max_num_batched_tokens", "max_num_seqs", "block_size", "num_kv_blocks", "max_model_len")
    ]
    out += [
        Requirement(
            c.max_num_scheduled_tokens is None or c.max_num_scheduled_tokens >= 1,
            lambda: f"max_num_scheduled_tokens must be at least 1 (or unset), got {c.max_num_scheduled_tokens}",
            name="max_num_scheduled_tokens-positive",
        ),
        Requirement(k >= 0, lambda: f"num_speculative_tokens must be >= 0, got {k}",
                    name="num_speculative_tokens-nonnegative"),
        Requirement(
            not_(and_(k > 0, method is None)),
            lambda: f"num_speculative_tokens={k} needs a method; set method to one of {', '.join(ALL_METHODS)}",
            name="drafts-need-method",
        ),
        Requirement(
            not_(and_(k == 0, method is not None)), lambda: f"method={method!r} needs num_speculative_tokens >= 1",
            name="method-needs-drafts",
        ),
        Requirement(
            method is None or method in ALL_METHODS,
            lambda: f"unknown method {method!r}; set method to one of {', '.join(ALL_METHODS)}",
            name="method-known",
        ),
        Requirement(
            not (c.parallel_drafting and method is None),
            lambda: "parallel_drafting needs speculative decoding; set method and num_speculative_tokens",
            name="parallel-drafting-needs-method",
        ),
        Requirement(
            c.scheduling_policy in SCHEDULING_POLICIES,
            lambda: f"scheduling_policy must be 'fcfs' or 'priority', got {c.scheduling_policy!r}",
            name="scheduling-policy-known",
        ),
        Requirement(
            c.long_prefill_token_threshold >= 0,
            lambda: f"long_prefill_token_threshold must be >= 0 (0 disables it), got {c.long_prefill_token_threshold}",
            name="long-prefill-threshold-nonnegative",
        ),
        Requirement(
            c.long_prefill_token_threshold <= c.max_model_len,
            lambda: f"long_prefill_token_threshold ({c.long_prefill_token_threshold}) cannot exceed max_model_len "
            f"({c.max_model_len}); lower long_prefill_token_threshold",
            name="long-prefill-threshold-within-model-len",
        ),
        Requirement(
            c.num_kv_blocks * c.block_size >= c.max_model_len,
            lambda: f"the KV pool holds {c.num_kv_blocks * c.block_size} tokens, less than one max_model_len "
            f"sequence ({c.max_model_len}); raise num_kv_blocks or lower max_model_len",
            name="kv-pool-holds-one-sequence",
        ),
    ]
    return out


# The shared requirements the model itself cannot run without (a pool, a batch, a known
# method); BudgetConfig enforces these whatever the policy. Every other shared requirement
# is the policy's to keep or drop (``BudgetPolicy.shared_requirements``).
STRUCTURAL = frozenset({
    "max_num_batched_tokens-positive", "max_num_seqs-positive", "block_size-positive", "num_kv_blocks-positive",
    "max_model_len-positive", "num_speculative_tokens-nonnegative", "drafts-need-method", "method-needs-drafts",
    "method-known", "parallel-drafting-needs-method", "scheduling-policy-known",
})


def structural_requirements(c: Any) -> list[Requirement]:
    """The ``STRUCTURAL`` subset of ``config_requirements``, in the same order."""
    return [r for r in config_requirements(c) if r.name in STRUCTURAL]


@dataclass(frozen=True)
class BudgetConfig:
    """The knobs of one deployment. Field names follow vLLM's."""

    max_num_batched_tokens: int = 8192
    max_num_seqs: int = 256
    max_num_scheduled_tokens: int | None = None
    num_speculative_tokens: int = 0
    method: str | None = None
    parallel_drafting: bool = False
    block_size: int = 16
    num_kv_blocks: int = 65536
    max_model_len: int = 8192
    long_prefill_token_threshold: int = 0
    scheduling_policy: str = "fcfs"
    enable_chunked_prefill: bool = True
    enable_prefix_caching: bool = True
    engine_version: str | None = None  # the engine version the policy follows; None: its newest

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if f.type in ("int", "int | None") and value is not None:
                if isinstance(value, bool) or not isinstance(value, int):
                    raise ConfigError(f"{f.name} must be an integer, got {value!r}")
            if f.type == "bool" and not isinstance(value, bool):
                raise ConfigError(f"{f.name} must be true or false, got {value!r}")
            if f.name in LIMITS and value is not None and value > LIMITS[f.name]:
                raise ConfigError(f"{f.name} must be at most {LIMITS[f.name]:,} (more than any deployment uses), "
                                  f"got {value:,}; lower {f.name}")
            if f.type in ("str", "str | None") and value is not None and not isinstance(value, str):
                raise ConfigError(f"{f.name} must be a string, got {value!r}")
        for r in structural_requirements(self):
            if not r.holds:
                raise ConfigError(r.message())

    @property
    def spec_enabled(self) -> bool:
        return self.num_speculative_tokens > 0

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "BudgetConfig":
        """Build from a mapping; unknown keys raise ConfigError naming the key."""
        known = {f.name for f in fields(cls)}
        for key in data:
            if key not in known:
                raise ConfigError(f"unknown config key {key!r}; known keys: {', '.join(sorted(known))}")
        return cls(**dict(data))

    def replace(self, **changes: Any) -> "BudgetConfig":
        return type(self)(**{**self.to_dict(), **changes})
