"""Token ids of a trace request's prompt, deterministic from the trace alone.

The first ``prefix_len`` tokens come from the request's ``prefix_group``, the rest from
the request itself, matching the content keys the scheduler's prefix cache assumes
(SPEC §5, item 4): two requests of one group share exactly their common prefix, so a
block one of them computed holds the right KV for the other.
"""
from __future__ import annotations

import random

from ..spec.trace import AddOp
from .models import FIRST_TEXT_TOKEN


def _draw(key: str, count: int, vocab_size: int) -> list[int]:
    rng = random.Random(key)
    return [rng.randrange(FIRST_TEXT_TOKEN, vocab_size) for _ in range(count)]


def prompt_tokens(op: AddOp, vocab_size: int) -> list[int]:
    """``op.prompt_len`` token ids in ``FIRST_TEXT_TOKEN..vocab_size-1``."""
    shared = _draw(f"group:{op.prefix_group}", op.prefix_len, vocab_size) if op.prefix_group is not None else []
    return shared + _draw(f"request:{op.id}", op.prompt_len - len(shared), vocab_size)
