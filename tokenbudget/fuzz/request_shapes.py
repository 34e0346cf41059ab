"""Workload strategies: request shapes and acceptance patterns, resolved against a config.

A shape says what kind of request to add (a 1-token prompt, k + 1, a block-size edge, a
budget edge, a prompt that chunks, a share of ``max_model_len`` or one that runs into it,
a prefix-group member) in small
integers that do not depend on the config, so the printed Hypothesis program reads well
and shrinks toward simple requests. ``resolve`` turns a shape into the ``AddOp`` that the
config makes of it; every length it yields is one the scheduler accepts.
"""
from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Mapping

from hypothesis import strategies as st

from ..model import BudgetConfig
from ..spec.trace import AddOp

PROMPT_KINDS = ("any", "one", "k+1", "blocks", "budget", "long", "share", "tail")
PREFIXES = (None, "g0:blocks", "g0:all-but-last", "g0:all", "g1:blocks", "g1:all-but-last", "g1:all")
PATTERNS = ("none", "all", "random")
MAX_TOKENS = 48  # keeps every drain short; "tail" prompts reach max_model_len within it
LEAST_URGENT = 3  # the largest priority drawn: under PRIORITY the least urgent


@dataclass(frozen=True)
class RequestShape:
    """A request in config-free terms (see ``resolve`` for what each field means)."""

    prompt: str  # one of PROMPT_KINDS
    n: int  # the kind's parameter
    max_tokens: int
    priority: int = 0
    prefix: str | None = None  # one of PREFIXES: "group:what it shares", or None


def request_shapes() -> st.SearchStrategy[RequestShape]:
    return st.builds(
        RequestShape,
        prompt=st.sampled_from(PROMPT_KINDS),
        n=st.integers(0, 300),
        max_tokens=st.integers(1, MAX_TOKENS),
        priority=st.integers(0, LEAST_URGENT),
        prefix=st.sampled_from(PREFIXES),
    )


BURST_KINDS = ("pages", "pages", "blocks", "one", "k+1", "share")
MAX_BURST = 8
BURST_MAX_TOKENS = 16


def bursts() -> st.SearchStrategy[list[RequestShape]]:
    """2 to ``MAX_BURST`` copies of one short request arriving together: prompts of whole pages
    or a token short (pages), at a page edge (blocks), of 1 or k + 1 tokens, or a share of
    max_model_len, and at most
    ``BURST_MAX_TOKENS`` out (the cost cap: a burst drains in a few dozen decodes), so that
    their decodes cross page boundaries in the same steps on a tight pool and retract."""
    shape = st.builds(RequestShape, prompt=st.sampled_from(BURST_KINDS), n=st.integers(0, 300),
                      max_tokens=st.integers(1, BURST_MAX_TOKENS))
    return st.tuples(shape, st.integers(2, MAX_BURST)).map(lambda pair: [pair[0]] * pair[1])


def page_bursts() -> st.SearchStrategy[list[RequestShape]]:
    """2 to ``MAX_BURST`` copies of a prompt of one or two whole pages (``pages`` with n 0 or 2:
    within a max_model_len of 2 pages or more), at most ``BURST_MAX_TOKENS`` out: all prefill
    before any decodes, then decode together from a KV that ends exactly on a page (where
    SGLang's spec-v1 page check counts no page)."""
    shape = st.builds(RequestShape, prompt=st.just("pages"), n=st.sampled_from((0, 0, 2)),
                      max_tokens=st.integers(1, BURST_MAX_TOKENS))
    return st.tuples(shape, st.integers(2, MAX_BURST)).map(lambda pair: [pair[0]] * pair[1])


def staggered_arrivals() -> st.SearchStrategy[tuple[int, list[RequestShape]]]:
    """Steps to run after the first requests (1-8), then the requests that arrive after them
    (none in one run of three): under PRIORITY they arrive more urgent (``resolve``), so they
    run behind less urgent requests, whose grants a preemption for them then takes back in
    the same pass (a same-step refund)."""
    return st.tuples(st.integers(1, 8), st.one_of(st.just([]), bursts(), st.lists(request_shapes(), min_size=1,
                                                                                      max_size=3)))


WAVE_MAX_TOKENS = 16


def priority_waves() -> st.SearchStrategy[tuple[list[RequestShape], tuple[int, list[RequestShape]]]]:
    """A least-urgent request of a short prompt, 1-3 steps, then a wave of 6 to ``MAX_BURST``
    such short prompts, each more urgent than it (and, by ``resolve``'s drift, than the one two
    before): ``(first requests, (steps, later requests))`` as the real engine's machine starts.
    The wave is admitted for its short prompts, then its decodes ask 1 + k each behind the
    least-urgent request, which the running loop granted first; on a tight pool the first of
    them short of a block preempts it in that pass (a same-step refund), and the rest ask
    for more than the budget left. The least-urgent request asks ``WAVE_MAX_TOKENS`` out, so it
    still runs when the wave comes; a wave request 4 to that (the cost cap)."""
    short = st.builds(RequestShape, prompt=st.just("short"), n=st.integers(0, 300),
                      max_tokens=st.integers(4, WAVE_MAX_TOKENS))
    first = short.map(lambda shape: [RequestShape("short", shape.n, WAVE_MAX_TOKENS, LEAST_URGENT)])
    return st.tuples(first, st.tuples(st.integers(1, 3), st.lists(short, min_size=6, max_size=MAX_BURST)))


def prompt_len(shape: RequestShape, cfg: BudgetConfig, chunk: int, draft_slots: int, longest: int | None = None) -> int:
    """The prompt length of a shape under cfg, 1 .. ``longest`` (the engine's; default max_model_len - 1).

    ``chunk`` is the most one request can be granted in a step (at most B - d), and
    ``draft_slots`` is d. Lengths are kept within 8 chunks so that every prompt prefills
    in a few steps whatever the config. any: up to 4 chunks · one: 1 · k+1: k + 1 ·
    blocks: a multiple of the block size, or one either side · budget: a chunk, or a
    chunk less d (whose grant leaves the input budget at exactly d, the loops' exit
    edge), or one either side · long: 1-2 chunks and more than a chunk, so it chunks ·
    share: max_model_len / 2, 3 or 4, so that a few requests fill a small KV pool as they
    decode · tail: within n % 16 tokens of ``longest`` · pages (bursts only): 1 to 4
    whole pages, or a token less, so that the KV ends on a page boundary after the prefill or
    the first decode · short (waves only): 2 to k - 1 tokens (2 where k < 4), shorter than one decode's 1 + k,
    so the prompt is admitted for less than its decodes later ask (a 1-token prompt is
    padded to 1 + k). n picks among the choices.
    """
    bs, top = cfg.block_size, cfg.max_model_len - 1 if longest is None else longest
    kind, n = shape.prompt, shape.n
    if kind == "one":
        return 1
    if kind == "k+1":
        return max(1, min(cfg.num_speculative_tokens + 1, top))
    if kind == "blocks":
        length = (n // 3 % 8 + 1) * bs + n % 3 - 1
    elif kind == "budget":
        length = chunk - n // 3 % 2 * draft_slots + n % 3 - 1
    elif kind == "long":
        length = chunk + 1 + n * chunk // 300
    elif kind == "share":
        length = cfg.max_model_len // (n % 3 + 2)
    elif kind == "tail":
        length = top - n % 16
    elif kind == "pages":
        length = (n // 2 % 4 + 1) * bs - n % 2
    elif kind == "short":
        length = 2 + n % max(1, cfg.num_speculative_tokens - 2)
    else:
        length = 1 + n % (4 * chunk)
    return max(1, min(length, top, 8 * chunk))


def resolve(shape: RequestShape, cfg: BudgetConfig, chunk: int, draft_slots: int, index: int,
            longest: int | None = None) -> AddOp:
    """The add op of the ``index``-th request (its id) of a shape under cfg (``chunk`` and
    ``draft_slots`` as for ``prompt_len``). A member of a prefix group shares 1-4 full
    blocks (n picks how many), all of its prompt but the last token, or all of it.

    Under PRIORITY the priority drifts one step more urgent every two arrivals
    (``shape.priority - index // 2``), so that a later arrival often outranks a request
    already running ahead of it: the case where a preemption takes back a grant of the
    same pass. Under FCFS it is 0 (it would mean nothing).
    """
    length = prompt_len(shape, cfg, chunk, draft_slots, longest)
    priority = shape.priority - index // 2 if cfg.scheduling_policy == "priority" else 0
    if shape.prefix is None:
        return AddOp(str(index), length, shape.max_tokens, priority)
    group, _, what = shape.prefix.partition(":")
    shared = {"blocks": (shape.n % 4 + 1) * cfg.block_size, "all-but-last": length - 1, "all": length}[what]
    return AddOp(str(index), length, shape.max_tokens, priority, group, min(shared, length))


def accepted_drafts(pattern: str, seed: int, live: list[str], k: int) -> Mapping[str, int]:
    """Drafts accepted per live request: none, all k, or each 0..k from ``seed``. The
    target clips them to the drafts it scheduled; zero entries are left out."""
    if k == 0 or pattern == "none":
        return {}
    if pattern == "all":
        return {rid: k for rid in live}
    rng = random.Random(seed)
    counts = {rid: rng.randint(0, k) for rid in live}
    return {rid: n for rid, n in counts.items() if n}
