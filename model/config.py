"""BudgetConfig: the scheduler knobs a budget policy reads, validated on construction."""
from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from typing import Any, Mapping

from .methods import ALL_METHODS


class ConfigError(ValueError):
    """A configuration that cannot be served; the message names the knob to change."""


SCHEDULING_POLICIES = ("fcfs", "priority")


@dataclass(frozen=True)
class BudgetConfig:
    """The knobs of one deployment. Field names follow vLLM's.

    ``num_speculative_tokens == 0`` means speculative decoding is off; then ``method``
    must be None. ``max_num_scheduled_tokens`` None lets the policy derive it.
    Engine-specific limits (for example vLLM's ``B >= S``) live in each policy's
    ``validate``; this class checks only what every engine agrees on.
    """

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

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if f.type in ("int", "int | None") and value is not None:
                if isinstance(value, bool) or not isinstance(value, int):
                    raise ConfigError(f"{f.name} must be an integer, got {value!r}")
            if f.type == "bool" and not isinstance(value, bool):
                raise ConfigError(f"{f.name} must be true or false, got {value!r}")
        for name in ("max_num_batched_tokens", "max_num_seqs", "block_size", "num_kv_blocks", "max_model_len"):
            if getattr(self, name) < 1:
                raise ConfigError(f"{name} must be at least 1, got {getattr(self, name)}")
        if self.max_num_scheduled_tokens is not None and self.max_num_scheduled_tokens < 1:
            raise ConfigError(
                f"max_num_scheduled_tokens must be at least 1 (or unset), got {self.max_num_scheduled_tokens}"
            )
        if self.num_speculative_tokens < 0:
            raise ConfigError(f"num_speculative_tokens must be >= 0, got {self.num_speculative_tokens}")
        if self.num_speculative_tokens > 0 and self.method is None:
            raise ConfigError(
                f"num_speculative_tokens={self.num_speculative_tokens} needs a method; set method to one of "
                f"{', '.join(ALL_METHODS)}"
            )
        if self.num_speculative_tokens == 0 and self.method is not None:
            raise ConfigError(f"method={self.method!r} needs num_speculative_tokens >= 1")
        if self.method is not None and self.method not in ALL_METHODS:
            raise ConfigError(f"unknown method {self.method!r}; set method to one of {', '.join(ALL_METHODS)}")
        if self.parallel_drafting and self.method is None:
            raise ConfigError("parallel_drafting needs speculative decoding; set method and num_speculative_tokens")
        if self.scheduling_policy not in SCHEDULING_POLICIES:
            raise ConfigError(f"scheduling_policy must be 'fcfs' or 'priority', got {self.scheduling_policy!r}")
        if self.long_prefill_token_threshold < 0:
            raise ConfigError(
                f"long_prefill_token_threshold must be >= 0 (0 disables it), got {self.long_prefill_token_threshold}"
            )
        if self.long_prefill_token_threshold > self.max_model_len:
            raise ConfigError(
                f"long_prefill_token_threshold ({self.long_prefill_token_threshold}) cannot exceed max_model_len "
                f"({self.max_model_len}); lower long_prefill_token_threshold"
            )
        if self.num_kv_blocks * self.block_size < self.max_model_len:
            raise ConfigError(
                f"the KV pool holds {self.num_kv_blocks * self.block_size} tokens, less than one max_model_len "
                f"sequence ({self.max_model_len}); raise num_kv_blocks or lower max_model_len"
            )

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
