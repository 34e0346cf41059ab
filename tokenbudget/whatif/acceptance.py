"""Accepted drafts per decode step, drawn from per-request random streams.

Request ``i``'s stream is seeded by ``(seed, 1, i)`` alone, and its ``j``-th decode step reads
the ``j``-th row of it whatever the policy: every policy sees the same luck.
"""
from __future__ import annotations

import numpy as np


class AcceptanceDraws:
    """The accepted-draft counts of one workload's requests, made on first use."""

    def __init__(self, rates: tuple[float, ...], k: int, seed: int) -> None:
        self.k = k
        self.seed = seed
        # a position past the given rates repeats the last one
        self.rates = np.array([rates[min(i, len(rates) - 1)] for i in range(k)]) if k else np.zeros(0)
        self._rows: dict[int, list[int]] = {}

    def accepted(self, index: int, decode_step: int, drafts: int, max_steps: int) -> int:
        """Drafts accepted (of ``drafts`` scheduled) at request ``index``'s ``decode_step``-th
        decode; ``max_steps`` bounds its decode steps (its output length)."""
        if drafts <= 0 or self.k == 0:
            return 0
        row = self._rows.get(index)
        if row is None:
            rng = np.random.default_rng([self.seed, 1, index])
            hits = rng.random((max_steps, self.k)) < self.rates
            row = self._rows[index] = np.cumprod(hits, axis=1).sum(axis=1).tolist()
        taken = row[decode_step] if decode_step < len(row) else 0
        return taken if taken < drafts else drafts

    def forget(self, index: int) -> None:
        """Drop a finished request's stream."""
        self._rows.pop(index, None)
