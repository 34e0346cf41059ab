"""Attention over a paged KV cache in plain torch, and the dense reference it must equal.

``paged_attend`` writes each layer's K and V of the batch rows into their cache slots,
then, request by request, gathers the keys and values of positions ``0..n-1`` through
the request's slots (its block table) and lets every query row see the positions up to
its own. ``dense_attend`` computes the same attention of one whole sequence from its own
K and V, with no cache: the recomputation that paged attention is checked against.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor

from .models import Attend
from .paged_kv import PagedKVCache

QUERY_CHUNK = 1024  # query rows per score matrix: bounds memory for long prefills


@dataclass(frozen=True)
class Segment:
    """The consecutive rows ``start..end-1`` of one request in a batch; ``context_slots``
    are the cache slots of its positions ``0..len-1``, covering every query position, or all
    but the last row's when ``last_unstored`` (its K and V are used, never stored)."""

    start: int
    end: int
    context_slots: Tensor
    last_unstored: bool = False


def causal_attention(q: Tensor, k: Tensor, v: Tensor, q_positions: Tensor) -> Tensor:
    """q [n, heads, dim] at ``q_positions``; k, v [c, heads, dim] of positions 0..c-1.
    Query row i attends to key j iff j <= q_positions[i]. Returns [n, heads, dim]."""
    key_positions = torch.arange(k.shape[0], device=k.device)
    keys, values = k.transpose(0, 1), v.transpose(0, 1)  # [heads, c, dim]
    out = torch.empty_like(q)
    for start in range(0, q.shape[0], QUERY_CHUNK):
        rows = slice(start, start + QUERY_CHUNK)
        # Keys no row of the chunk sees are left out (the last chunk takes them all: no device sync).
        seen = k.shape[0] if start + QUERY_CHUNK >= q.shape[0] else int(q_positions[rows].max()) + 1
        visible = key_positions[None, :seen] <= q_positions[rows, None]  # [n, seen]
        out[rows] = F.scaled_dot_product_attention(q[rows].transpose(0, 1), keys[:, :seen], values[:, :seen],
                                                   attn_mask=visible).transpose(0, 1)
    return out


def dense_attend(positions: Tensor) -> Attend:
    """Attention of one whole sequence over itself (rows at positions 0..n-1, no cache)."""

    def attend(layer: int, q: Tensor, k: Tensor, v: Tensor) -> Tensor:
        return causal_attention(q, k, v, positions)
    return attend


def paged_attend(cache: PagedKVCache, slots: Tensor, positions: Tensor, segments: list[Segment]) -> Attend:
    """Attention of a batch over the paged cache: each layer first writes the rows' K and V
    at ``slots`` (one per row; a row at slot -1 is not stored), then each segment attends over
    its context slots, and over its last row's own K and V where that row is not stored."""
    every_row_stored = not any(seg.last_unstored for seg in segments)  # known on the host: no device sync
    stored = slots >= 0

    def attend(layer: int, q: Tensor, k: Tensor, v: Tensor) -> Tensor:
        if every_row_stored:
            cache.write(layer, slots, k, v)
        else:
            cache.write(layer, slots[stored], k[stored], v[stored])
        out = torch.empty_like(q)
        for seg in segments:
            keys, values = cache.read(layer, seg.context_slots)
            if seg.last_unstored:
                keys, values = torch.cat([keys, k[seg.end - 1:seg.end]]), torch.cat([values, v[seg.end - 1:seg.end]])
            out[seg.start:seg.end] = causal_attention(q[seg.start:seg.end], keys, values,
                                                      positions[seg.start:seg.end])
        return out
    return attend
