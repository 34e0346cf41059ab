"""Two tiny language models built from a seed: a decoder-only target and its early-exit drafter.

The target is a pre-norm decoder: RMSNorm, multi-head attention with rotary position
embeddings (RoPE), a SwiGLU MLP and an untied LM head. The drafter is an early exit of the
target: its first ``draft_layers`` layers, then the target's final norm and head. It
agrees with the target often but not always, and its KV for those layers is the target's
own (same weights, same tokens, same positions), so both share one paged cache.

Attention is not done here. Each layer hands q, k and v of its rows to an ``Attend``
callback, so the same weights run over the paged KV cache (the runner) or densely over a
whole sequence (the reference the tests compare against). Weights come from a
``torch.Generator`` seeded with ``ModelSpec.seed``: the same spec gives the same models
on every machine and device (they are drawn on the CPU, then moved).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import torch
from torch import Tensor

PAD_TOKEN = 0  # placeholder rows (padded drafts, unused rows)
MASK_TOKEN = 1  # the query token of a parallel-drafting row
FIRST_TEXT_TOKEN = 2  # prompts and outputs use ids >= this

# (layer index, q, k, v) -> attention output; q, k, v and the result are [rows, heads, head_dim].
Attend = Callable[[int, Tensor, Tensor, Tensor], Tensor]


@dataclass(frozen=True)
class ModelSpec:
    """Sizes of the target; the drafter is its first ``draft_layers`` layers."""

    vocab_size: int = 256
    hidden_size: int = 64
    num_layers: int = 4
    num_heads: int = 4
    mlp_size: int = 256
    draft_layers: int = 2
    rope_base: float = 10000.0
    seed: int = 0

    def __post_init__(self) -> None:
        if self.hidden_size % self.num_heads or (self.hidden_size // self.num_heads) % 2:
            raise ValueError(f"hidden_size {self.hidden_size} must split into {self.num_heads} heads of even size")
        if not 1 <= self.draft_layers < self.num_layers:
            raise ValueError(f"draft_layers must be 1..{self.num_layers - 1}, got {self.draft_layers}")
        if self.vocab_size <= FIRST_TEXT_TOKEN:
            raise ValueError(f"vocab_size must exceed {FIRST_TEXT_TOKEN}")

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_heads

    def describe(self) -> str:
        return (f"vocab {self.vocab_size}, hidden {self.hidden_size}, {self.num_layers} layers "
                f"({self.draft_layers} in the drafter), {self.num_heads} heads, mlp {self.mlp_size}")


MODEL_SPECS: dict[str, ModelSpec] = {
    "tiny": ModelSpec(),  # the CPU default
    "wide": ModelSpec(vocab_size=8192, hidden_size=1024, num_layers=4, num_heads=8, mlp_size=4096),
}

# Residual branches are scaled down so that the stream is carried mostly by the
# embedding and the first layers: the early exit then agrees with the target often,
# the last layers still change some of its choices.
RESIDUAL_SCALE = 0.3


@dataclass(frozen=True)
class LayerWeights:
    attn_norm: Tensor
    wqkv: Tensor  # [hidden, 3 * hidden]
    wo: Tensor  # [hidden, hidden]
    mlp_norm: Tensor
    w_gate: Tensor  # [hidden, mlp]
    w_up: Tensor  # [hidden, mlp]
    w_down: Tensor  # [mlp, hidden]


def rms_norm(x: Tensor, weight: Tensor, eps: float = 1e-6) -> Tensor:
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * weight


def rope(x: Tensor, positions: Tensor, base: float) -> Tensor:
    """Rotate [rows, heads, head_dim] by each row's position (rotate-half layout)."""
    half = x.shape[-1] // 2
    inv_freq = base ** (-torch.arange(half, device=x.device, dtype=torch.float32) / half)
    angles = positions.to(torch.float32)[:, None] * inv_freq[None, :]
    cos, sin = angles.cos()[:, None, :].to(x.dtype), angles.sin()[:, None, :].to(x.dtype)
    x1, x2 = x[..., :half], x[..., half:]
    return torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1)


class TinyLM:
    """The target decoder. ``hidden(..., num_layers=spec.draft_layers)`` is the drafter's trunk."""

    def __init__(self, spec: ModelSpec, device: torch.device | str = "cpu", dtype: torch.dtype = torch.float32) -> None:
        self.spec = spec
        gen = torch.Generator().manual_seed(spec.seed)
        h, m = spec.hidden_size, spec.mlp_size

        def draw(rows: int, cols: int, scale: float = 1.0) -> Tensor:
            w = torch.randn(rows, cols, generator=gen) * (scale / math.sqrt(rows))
            return w.to(device=device, dtype=dtype)

        def ones() -> Tensor:
            return torch.ones(h, device=device, dtype=dtype)

        self.embedding = (torch.randn(spec.vocab_size, h, generator=gen)).to(device=device, dtype=dtype)
        self.layers = [
            LayerWeights(ones(), draw(h, 3 * h), draw(h, h, RESIDUAL_SCALE), ones(), draw(h, m), draw(h, m),
                         draw(m, h, RESIDUAL_SCALE))
            for _ in range(spec.num_layers)
        ]
        self.final_norm = ones()
        self.head = draw(h, spec.vocab_size, 4.0)  # logits of a few units: decisive but not one-hot

    def hidden(self, token_ids: Tensor, positions: Tensor, attend: Attend, num_layers: int) -> Tensor:
        """The residual stream [rows, hidden] after the first ``num_layers`` layers."""
        x = self.embedding[token_ids]
        for index in range(num_layers):
            x = self._layer(index, x, positions, attend)
        return x

    def logits(self, hidden: Tensor) -> Tensor:
        """[rows, vocab] from the residual stream (the target's and the drafter's head)."""
        return rms_norm(hidden, self.final_norm) @ self.head

    def _layer(self, index: int, x: Tensor, positions: Tensor, attend: Attend) -> Tensor:
        w, spec = self.layers[index], self.spec
        rows, heads, dim = x.shape[0], spec.num_heads, spec.head_dim
        q, k, v = (rms_norm(x, w.attn_norm) @ w.wqkv).view(rows, 3, heads, dim).unbind(1)
        q, k = rope(q, positions, spec.rope_base), rope(k, positions, spec.rope_base)
        x = x + attend(index, q, k, v).reshape(rows, -1) @ w.wo
        h = rms_norm(x, w.mlp_norm)
        return x + (torch.nn.functional.silu(h @ w.w_gate) * (h @ w.w_up)) @ w.w_down
