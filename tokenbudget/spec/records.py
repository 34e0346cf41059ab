"""Observations: what a target produced, in the shape the invariants judge.

A target (the reference model, a real engine, the torch runner) turns one
``schedule()`` call into a StepRecord and one ``update_from_output`` into a
StepOutcome. A RunRecord is the whole run of a trace. Nothing here imports the rest of
tokenbudget: any target can produce these.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Hashable, Iterable, NamedTuple, Optional, Sequence

from .kv_groups import GroupTables


@dataclass(frozen=True)
class StepLimits:
    """The limits of the deployment as the target applies them. ``draft_slots`` and
    ``lookahead`` are what the engine's runner physically takes (the method table's), which
    the scheduler under test may reserve more of (``reserved_lookahead``)."""

    max_num_batched_tokens: int  # B: runner input rows per step
    max_num_scheduled_tokens: int  # T: target tokens per step
    max_num_seqs: int  # S
    num_speculative_tokens: int  # k
    draft_slots: int  # d: drafter rows past each scheduled request's target rows (physical)
    lookahead: int  # L: KV slots the drafter writes past a request's target rows (physical)
    max_model_len: int
    block_size: int
    num_kv_blocks: int
    context_headroom: int = 0  # positions past max_model_len the engine's KV tables hold (SGLang's req_to_token rows)
    encoder_compute_budget: int = 0  # encoder embeddings a step may compute (vLLM's max_num_encoder_input_tokens)
    encoder_cache_size: int = 0  # encoder embeddings the encoder cache may hold
    # What the deployment's limits do not include, so two targets' limits compare without them:
    method: Optional[str] = field(default=None, compare=False)  # the speculative method, named in messages
    reserved_lookahead: Optional[int] = field(default=None, compare=False)  # L the scheduler reserves; None: L
    sampled_tokens: int = 1  # tokens a step samples past a finished prefill or a decode; 0 for pooling, diffusion


class EncoderInput(NamedTuple):
    """An encoder input (a multimodal item) of a scheduled request that the step encodes or
    whose placeholder positions its grant reaches. ``key``: the item's content key (equal keys
    share one encoder output); ``embeds``: what encoding it costs the encoder budget;
    ``embeds_in_grant``: its embeddings among the positions the grant computes."""

    request_id: str
    index: int
    key: str
    embeds: int
    embeds_in_grant: int
    scheduled: bool  # the encoder runs on it in this step, for this request


class LedgerEntry(NamedTuple):
    """One movement of the budgets during a pass.

    ``kind`` is "grant" (a request was scheduled ``tokens`` tokens) or "refund" (a
    request scheduled earlier in the same pass was preempted, ``tokens`` being its
    grant). Deltas are signed changes; input fields are None where the target keeps no
    input budget.
    """

    kind: str
    request_id: str
    tokens: int
    token_before: int
    token_after: int
    input_before: Optional[int]
    input_after: Optional[int]


@dataclass(frozen=True)
class StepRecord:
    """What one ``schedule()`` call produced.

    Per scheduled request: the grant (``num_scheduled_tokens``), the drafts scheduled with
    it, the runner rows it really occupies, the computed tokens it started from and its
    token count. ``block_tables`` holds every live request's KV blocks after the pass (and
    ``kv_groups`` each KV cache group's, where more than that one full-attention group),
    ``block_keys`` the content key of each block that holds one (prefix cache).
    ``ledger`` and ``progress_possible`` are None where the target does not expose them.

    ``fingerprint`` stands for the target's whole scheduler state at the start of the pass
    (queues, computed, output and draft tokens, blocks, the loop's own counters): two
    records with equal fingerprints started from the same state, so with no add or abort
    between them the first pass led back to where it began and will repeat for ever
    (``progress``'s fixpoint rule). None where the target cannot expose its state.
    """

    step: int
    limits: StepLimits
    num_scheduled_tokens: dict[str, int]
    scheduled_draft_tokens: dict[str, int]
    runner_rows: dict[str, int]
    computed_before: dict[str, int]
    num_tokens: dict[str, int]  # prompt + output tokens of each scheduled request
    padded: frozenset[str]
    prefill: frozenset[str]  # requests scheduled as a prefill chunk
    preempted: tuple[str, ...]
    running: tuple[str, ...]  # after the pass
    waiting: Sequence[str]  # after the pass: a tuple, or a QueueIds window (equal to the tuple of its ids)
    kv_blocks_in_use: int
    block_tables: dict[str, tuple[int, ...]]
    block_keys: dict[int, object]
    initial_token_budget: Optional[int] = None
    initial_input_budget: Optional[int] = None
    ledger: Optional[tuple[LedgerEntry, ...]] = None
    progress_possible: Optional[bool] = None  # some request could take a token this step
    unserved_demand: Optional[int] = None  # tokens queued requests still wanted after the pass
    error: Optional[str] = None  # an exception the target raised inside the pass
    raised_by: str = "scheduler"  # what raised ``error``: the scheduler, or the runner executing the step
    paused: frozenset[str] = frozenset()  # running decodes the worker paused: 0 rows, no grant
    fingerprint: Optional[Hashable] = None  # the scheduler state at the start of the pass (see above)
    stale_drafts: frozenset[str] = frozenset()  # async: scheduled with placeholder drafts made for an earlier step
    kv_groups: tuple[GroupTables, ...] = ()  # every KV cache group, where not the one of block_tables
    encoder_inputs: tuple[EncoderInput, ...] = ()  # multimodal: what the step encodes or reads of encoder inputs
    encoder_held: frozenset[str] = frozenset()  # keys of those inputs the runner's encoder cache held as the step began
    encoder_cache_used: int = 0  # encoder embeddings the encoder cache holds after the pass

    @property
    def total_scheduled_tokens(self) -> int:
        return sum(self.num_scheduled_tokens.values())

    @property
    def total_runner_rows(self) -> int:
        return sum(self.runner_rows.values())


def pass_record(
    step: int, limits: StepLimits, grants: dict[str, int], drafts: dict[str, int], rows: dict[str, int],
    computed_before: dict[str, int], num_tokens: dict[str, int], prefill: Iterable[str], preempted: Iterable[str],
    running: Iterable[str], waiting: Sequence[str], kv_blocks_in_use: int, block_tables: dict[str, tuple[int, ...]],
    block_keys: dict[int, object], *, padded: Iterable[str] = (), paused: Iterable[str] = (),
    initial_token_budget: Optional[int] = None, initial_input_budget: Optional[int] = None,
    ledger: Optional[Iterable[LedgerEntry]] = None, progress_possible: Optional[bool] = None,
    unserved_demand: Optional[int] = None, error: Optional[str] = None, fingerprint: Optional[Hashable] = None,
    kv_groups: Iterable[GroupTables] = (),
    encoder_inputs: Iterable[EncoderInput] = (), encoder_held: Iterable[str] = (), encoder_cache_used: int = 0,
) -> StepRecord:
    """The StepRecord of one pass, the one way every target builds it: the maps are taken as
    given (not copied), the id sets become frozensets and the sequences tuples (``waiting`` is
    kept as it is: a tuple or a QueueIds window)."""
    return StepRecord(
        step=step, limits=limits, num_scheduled_tokens=grants, scheduled_draft_tokens=drafts, runner_rows=rows,
        computed_before=computed_before, num_tokens=num_tokens, padded=frozenset(padded), prefill=frozenset(prefill),
        preempted=tuple(preempted), running=tuple(running), waiting=waiting, kv_blocks_in_use=kv_blocks_in_use,
        block_tables=block_tables, block_keys=block_keys, initial_token_budget=initial_token_budget,
        initial_input_budget=initial_input_budget, ledger=None if ledger is None else tuple(ledger),
        progress_possible=progress_possible, unserved_demand=unserved_demand, error=error,
        paused=frozenset(paused), fingerprint=fingerprint, kv_groups=tuple(kv_groups),
        encoder_inputs=tuple(encoder_inputs), encoder_held=frozenset(encoder_held), encoder_cache_used=encoder_cache_used,
    )


class RequestState(NamedTuple):
    """A request after a step's output was applied."""

    status: str  # waiting | running | finished | aborted
    num_computed_tokens: int
    num_output_tokens: int
    max_tokens: int
    num_prompt_tokens: int


@dataclass(frozen=True)
class StepOutcome:
    """What ``update_from_output`` left behind: the state of every request the step
    scheduled, preempted or aborted (the others did not change). A request the engine
    itself aborted in the step (SGLang's ``retract_decode`` aborting the last decode that
    cannot fit) is here with status "aborted": an outcome of the step, not a lost request."""

    step: int
    requests: dict[str, RequestState]
    preempted: frozenset[str] = field(default_factory=frozenset)


@dataclass
class RunRecord:
    """The observations of one whole run: ops applied, records and outcomes in order.

    ``events`` lists ("add", id) / ("abort", id) / ("step", index) in the order applied;
    ``added`` holds each request's state when it was added.
    """

    limits: StepLimits
    added: dict[str, RequestState] = field(default_factory=dict)
    events: list[tuple[str, object]] = field(default_factory=list)
    steps: list[StepRecord] = field(default_factory=list)
    outcomes: list[StepOutcome] = field(default_factory=list)
