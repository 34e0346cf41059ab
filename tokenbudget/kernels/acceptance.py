"""Choosing tokens and verifying drafts: greedy match or rejection sampling.

``Sampler`` picks tokens from logits (the target's bonus token, the drafter's drafts):
the argmax under ``greedy``; under ``rejection`` a sample at temperature 1 from a seeded
generator, keeping the distribution so that the drafts can be verified by rejection
sampling (Leviathan et al.): draft x is kept with probability min(1, p(x) / q(x)); the
first refused one is replaced by a sample of the normalised max(0, p - q); when all are
kept the bonus token is sampled from p at the next row. All sampling runs on the CPU.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Sequence

import torch
from torch import Tensor

Rule = Literal["greedy", "rejection"]
RULES: tuple[Rule, ...] = ("greedy", "rejection")


@dataclass(frozen=True)
class Choice:
    """Tokens chosen from rows of logits; ``probs`` [rows, vocab] under rejection sampling."""

    tokens: list[int]
    probs: Tensor | None


@dataclass(frozen=True)
class Verification:
    """``own``: drafts the runner's rule accepted; ``tokens``: what the step commits, the
    ``applied`` accepted drafts and then the target's token at the next row."""

    own: int
    applied: int
    tokens: list[int]


class Sampler:
    def __init__(self, rule: Rule, seed: int) -> None:
        self.rule = rule
        self._gen = torch.Generator().manual_seed(seed)

    def choose(self, logits: Tensor) -> Choice:
        """One token per row of logits [rows, vocab]."""
        logits = logits.float().cpu()
        if self.rule == "greedy":
            return Choice(logits.argmax(-1).tolist(), None)
        probs = logits.softmax(-1)
        return Choice(torch.multinomial(probs, 1, generator=self._gen)[:, 0].tolist(), probs)

    def verify(self, logits: Tensor, drafts: Sequence[int], draft_probs: Tensor | None,
               forced: int | None) -> Verification:
        """Verify ``drafts`` against the target's logits [len(drafts) + 1, vocab] (row i scores
        the token after draft i-1). ``draft_probs`` [len(drafts), vocab] is the drafter's
        distribution (None: the drafts were chosen deterministically, as greedy or n-gram
        drafts). ``forced``, when given, overrides how many drafts are accepted."""
        logits = logits.float().cpu()
        if self.rule == "greedy":
            target = logits.argmax(-1).tolist()
            own = next((i for i, x in enumerate(drafts) if target[i] != x), len(drafts))
            applied = own if forced is None else min(forced, len(drafts))
            return Verification(own, applied, list(drafts[:applied]) + [target[applied]])
        p = logits.softmax(-1)
        own, replacement = len(drafts), None
        for i, x in enumerate(drafts):
            q_x = 1.0 if draft_probs is None else float(draft_probs[i, x])
            if float(torch.rand((), generator=self._gen)) * q_x >= float(p[i, x]):
                residual = p[i] - (torch.nn.functional.one_hot(torch.tensor(x), p.shape[-1]).float()
                                   if draft_probs is None else draft_probs[i])
                own, replacement = i, self._sample(residual.clamp(min=0), p[i])
                break
        applied = own if forced is None else min(forced, len(drafts))
        bonus = replacement if applied == own and replacement is not None else self._sample(p[applied], p[applied])
        return Verification(own, applied, list(drafts[:applied]) + [bonus])

    def _sample(self, weights: Tensor, fallback: Tensor) -> int:
        """A sample of ``weights`` normalised (``fallback`` where they are all zero)."""
        w = weights if float(weights.sum()) > 0 else fallback
        return int(torch.multinomial(w, 1, generator=self._gen))
