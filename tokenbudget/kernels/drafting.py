"""Drafts for the next step: what a drafter proposes, and the n-gram proposer.

Methods that draft with a model (eagle3, mtp, dflash, dspark, draft_model) use the
early-exit drafter, run by the runner over the paged cache; ``ngram`` uses the n-gram
proposer below, which needs no model and writes no KV (hence its lookahead L = 0).
As in the model (SPEC §5, item 2) a drafter always proposes k drafts.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from torch import Tensor

NGRAM_MAX_N = 3


@dataclass(frozen=True)
class Proposal:
    """k drafts for a request's next step; ``probs`` [k, vocab] is the drafter's distribution
    under rejection sampling (None for deterministic drafts)."""

    tokens: list[int]
    probs: Tensor | None = None


def ngram_propose(tokens: Sequence[int], k: int) -> list[int]:
    """k drafts that continue the latest earlier occurrence of the longest suffix n-gram
    (n = 3, 2, 1) of ``tokens``, padded with the continuation's last token; the last token
    repeated when no suffix recurs."""
    for n in range(min(NGRAM_MAX_N, len(tokens) - 1), 0, -1):
        suffix = list(tokens[-n:])
        for start in range(len(tokens) - n - 1, -1, -1):
            if list(tokens[start:start + n]) == suffix:
                follow = list(tokens[start + n:start + n + k])
                return follow + [follow[-1]] * (k - len(follow))
    return [tokens[-1]] * k
