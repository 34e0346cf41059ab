"""TensorRT-LLM's context chunking: how the capacity left after the generation requests is
split among the context requests, and how many drafts a last chunk keeps."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Sequence

from ...spec.intlike import IntLike, ite

EQUAL_PROGRESS, FIRST_COME_FIRST_SERVED, FORCE_CHUNK = "equal_progress", "first_come_first_served", "force_chunk"
CHUNKING_POLICIES = (EQUAL_PROGRESS, FIRST_COME_FIRST_SERVED, FORCE_CHUNK)


@dataclass(frozen=True)
class Context:
    remaining: int  # context_remaining_length
    reusable: int = 0  # estimated_reusable_tokens of a first chunk
    drafts: int = 0  # draft tokens riding on the last chunk

    def __post_init__(self) -> None:
        assert self.remaining >= 1 and 0 <= self.reusable and 0 <= self.drafts, self


def reuse_adjusted_compute(chunk: int, reusable: int, remaining: int) -> int:
    """Tokens the forward computes for a chunk of ``chunk`` when ``reusable`` come from the
    cache: a chunk short of the end is shifted, not shrunk; only the last costs less."""
    if reusable <= 0 or reusable + chunk < remaining:
        return chunk
    return max(0, remaining - reusable)


def aligned_chunk(grant: IntLike, demand: IntLike, unit: IntLike) -> IntLike:
    """A context chunk cut short of ``demand`` aligned down to the chunk unit (the block size
    PyExecutor passes: ``_chunk_fcfs``, scheduler.py:1249-1251 at 002f3cc3); a whole remainder is kept."""
    return ite(grant < demand, grant - grant % unit, grant)


def _compute(ctx: Context, chunk: int) -> int:
    return reuse_adjusted_compute(chunk, min(ctx.reusable, ctx.remaining), ctx.remaining)


def chunk_sizes(policy: str, contexts: Sequence[Context], capacity: Optional[int], unit: int,
                max_context_length: Optional[int]) -> list[int]:
    """The chunk of each context under ``policy``; ``capacity`` None means unbounded."""
    assert policy in CHUNKING_POLICIES and unit >= 1, (policy, unit)
    if policy == EQUAL_PROGRESS:
        return _equal_progress(contexts, capacity, unit, max_context_length)
    if policy == FIRST_COME_FIRST_SERVED:
        return _first_come_first_served(contexts, capacity, unit, max_context_length)
    return _forced(contexts, capacity, unit, max_context_length)


def _equal_progress(contexts: Sequence[Context], capacity: Optional[int], unit: int,
                    max_context_length: Optional[int]) -> list[int]:
    """Rounds of one more unit for every context, each kept only if it fits the capacity
    and max_context_length, until a round adds nothing."""
    sizes = [0] * len(contexts)
    spent, grew = 0, True
    while grew and (capacity is None or spent < capacity):
        grew = False
        for i, ctx in enumerate(contexts):
            size = min(sizes[i] + unit, ctx.remaining)
            more = _compute(ctx, size) - _compute(ctx, sizes[i])
            if (capacity is not None and spent + more > capacity) or \
                    (max_context_length is not None and size > max_context_length):
                continue
            grew = grew or size > sizes[i]
            spent += more
            sizes[i] = size
    return sizes


def _first_come_first_served(contexts: Sequence[Context], capacity: Optional[int], unit: int,
                             max_context_length: Optional[int]) -> list[int]:
    """In order, each context takes what it wants of the capacity left, trimmed to
    max_context_length; a trimmed chunk is aligned down to the unit."""
    left = capacity
    sizes = []
    for ctx in contexts:
        size = ctx.remaining
        if left is not None and left < _compute(ctx, size):
            size = left
        if max_context_length is not None and _compute(ctx, size) > max_context_length:
            size = min(max_context_length, ctx.remaining)
        if size < ctx.remaining:
            size = size // unit * unit
        sizes.append(size)
        if left is not None:
            left -= _compute(ctx, size)
    return sizes


def _forced(contexts: Sequence[Context], capacity: Optional[int], unit: int,
            max_context_length: Optional[int]) -> list[int]:
    """Each context its whole remainder (no snapshot points here), cut to whole units of
    max_context_length and of the capacity left; reuse is not discounted."""
    if max_context_length is not None and max_context_length < unit:
        raise ValueError(f"FORCE_CHUNK's unit ({unit}) exceeds max_context_length ({max_context_length})")
    total, sizes = 0, []
    for ctx in contexts:
        size = ctx.remaining
        if max_context_length is not None and size > max_context_length:
            size = max_context_length // unit * unit
        if capacity is not None and total + size > capacity:
            size = min(size, max(0, capacity - total)) // unit * unit
        sizes.append(size)
        total += size
    return sizes


def kept_drafts(contexts: Sequence[Context], sizes: Sequence[int], capacity: Optional[int], unit: int,
                max_context_length: Optional[int], clamped: bool = True) -> list[int]:
    """The drafts that run with each context's chunk (``_fit_draft_tokens``): none with a
    chunk short of the end; a last chunk keeps what fits the slack of its last unit, of
    max_context_length and of the capacity left."""
    spent = sum(_compute(ctx, size) for ctx, size in zip(contexts, sizes))
    out = []
    for ctx, size in zip(contexts, sizes):
        if not (ctx.drafts and size >= ctx.remaining):
            out.append(ctx.drafts if size >= ctx.remaining else 0)
            continue
        space = 0 if size % unit == 0 else unit - size % unit
        if max_context_length is not None:
            space = min(space, max_context_length - size)
        if clamped:
            keep = min(ctx.drafts, max(0, space))
            if capacity is not None:
                keep = max(0, min(keep, capacity - spent))
                spent += keep
        else:
            if capacity is not None:
                space = min(space, capacity - spent)
                spent += space
            keep = min(ctx.drafts, space)  # num_draft_tokens - draft_discard
        out.append(keep)
    return out
