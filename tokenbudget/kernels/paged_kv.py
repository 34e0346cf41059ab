"""A paged KV cache that follows the scheduler's block tables.

Every layer has one K and one V tensor with a row per slot; a request's position p lives
in slot ``table[p // block_size] * block_size + p % block_size`` of its block table. The
cache is materialised up to the highest block id used so far (``reserve``), growing
geometrically: a model-sized pool of 65,536 blocks would cost gigabytes for nothing. A
runner that must hold the whole pool up front (the CUDA memory cap) reserves it at once.
"""
from __future__ import annotations

from typing import Sequence

import torch
from torch import Tensor

from .errors import KVOverflow


class PagedKVCache:
    def __init__(self, num_layers: int, num_blocks: int, block_size: int, num_heads: int, head_dim: int,
                 device: torch.device | str, dtype: torch.dtype = torch.float32) -> None:
        self.num_blocks = num_blocks
        self.block_size = block_size
        self._shape = (num_heads, head_dim)
        self._device, self._dtype = torch.device(device), dtype
        self.k: list[Tensor] = [self._empty(0) for _ in range(num_layers)]
        self.v: list[Tensor] = [self._empty(0) for _ in range(num_layers)]

    @property
    def num_reserved_blocks(self) -> int:
        return self.k[0].shape[0] // self.block_size

    def _empty(self, blocks: int) -> Tensor:
        return torch.zeros(blocks * self.block_size, *self._shape, device=self._device, dtype=self._dtype)

    def reserve(self, num_blocks: int) -> None:
        """Materialise blocks ``0..num_blocks-1`` (at most the pool); existing contents are kept."""
        have = self.num_reserved_blocks
        if num_blocks <= have:
            return
        target = min(self.num_blocks, max(num_blocks, 2 * have, 64))
        for cache in (self.k, self.v):
            for i, old in enumerate(cache):
                grown = self._empty(target)
                grown[: old.shape[0]] = old
                cache[i] = grown

    def write(self, layer: int, slots: Tensor, k: Tensor, v: Tensor) -> None:
        """Store rows' K and V [rows, heads, dim] at their slots."""
        self.k[layer][slots] = k
        self.v[layer][slots] = v

    def read(self, layer: int, slots: Tensor) -> tuple[Tensor, Tensor]:
        return self.k[layer][slots], self.v[layer][slots]


def slot_mapping(step: int, request_id: str, table: Sequence[int], positions: Tensor, block_size: int) -> Tensor:
    """Slots of ``positions`` in the request's blocks. A position past the blocks the request
    holds is an out-of-range index into its block table, raised as KVOverflow."""
    blocks = torch.tensor(table, dtype=torch.long)
    index = torch.div(positions, block_size, rounding_mode="floor")
    try:
        return blocks[index] * block_size + positions % block_size
    except IndexError:
        bad = int(positions[index >= len(table)][0])
        raise KVOverflow(step, request_id, bad, len(table), block_size) from None
