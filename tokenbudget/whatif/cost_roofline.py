"""Cost model (a): a roofline. A step takes the larger of its compute time and its memory
time, plus a fixed per-step and per-sequence cost, plus its drafter's own roofline.

Compute: 2 x active parameters per token, and per (query, key) pair the attention's
2 x heads x (qk_dim + v_dim) per layer. Memory: the weights read (the dense part, and the
share of experts that ``tokens`` routed tokens touch: 1 - (1 - top_k/experts)^tokens), and
each sequence's KV once per layer. Every number in a roofline file carries its source.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .step_shape import StepShape

MODEL_KEYS = ("num_layers", "num_heads", "qk_dim", "v_dim", "kv_bytes_per_token_layer", "dense_params",
              "expert_params", "num_experts", "experts_per_token", "bytes_per_param", "drafter_params")
ACCELERATOR_KEYS = ("count", "peak_flops", "memory_bandwidth", "flops_efficiency", "bandwidth_efficiency",
                    "per_step_s", "per_seq_s")


@dataclass(frozen=True)
class RooflineCost:
    """``model`` and ``accelerator`` hold the values of ``MODEL_KEYS`` and ``ACCELERATOR_KEYS``;
    ``doc`` the file as read, sources included."""

    model: dict[str, float]
    accelerator: dict[str, float]
    doc: dict[str, Any]

    def step_seconds(self, shape: StepShape) -> float:
        m, a = self.model, self.accelerator
        flops = a["count"] * a["peak_flops"] * a["flops_efficiency"]
        bandwidth = a["count"] * a["memory_bandwidth"] * a["bandwidth_efficiency"]
        tokens = shape.tokens
        active = m["dense_params"] + m["expert_params"] * m["experts_per_token"] / m["num_experts"]
        attention = 2 * m["num_layers"] * m["num_heads"] * (m["qk_dim"] + m["v_dim"]) * shape.token_context
        compute = (2 * active * tokens + attention) / flops
        touched = 1 - (1 - m["experts_per_token"] / m["num_experts"]) ** tokens
        weights = (m["dense_params"] + m["expert_params"] * touched) * m["bytes_per_param"]
        kv = m["kv_bytes_per_token_layer"] * m["num_layers"] * shape.kv_tokens
        memory = (weights + kv) / bandwidth
        drafter = 0.0
        if shape.draft_rows:
            drafter = max(2 * m["drafter_params"] * shape.draft_rows / flops,
                          m["drafter_params"] * m["bytes_per_param"] / bandwidth)
        return max(compute, memory) + a["per_step_s"] + a["per_seq_s"] * shape.num_seqs + drafter

    def to_dict(self) -> dict[str, Any]:
        return self.doc

    @classmethod
    def from_dict(cls, doc: dict[str, Any]) -> "RooflineCost":
        """KeyError naming a missing number; each is ``{"value": v, "source": "..."}``."""
        def values(section: str, keys: tuple[str, ...]) -> dict[str, float]:
            out = {}
            for key in keys:
                entry = doc[section].get(key)
                if not isinstance(entry, dict) or "value" not in entry or not entry.get("source"):
                    raise KeyError(f"{section}.{key} (a value with its source)")
                out[key] = float(entry["value"])
            return out
        return cls(values("model", MODEL_KEYS), values("accelerator", ACCELERATOR_KEYS), doc)
