"""ModelRunner: executes the scheduler's steps for real, on the target and its drafter."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping, Sequence

import torch
from torch import Tensor

from ..model.methods import MODEL_DRAFTER, NGRAM_DRAFTER, first_pass_drafts
from ..spec.records import StepLimits, StepRecord
from .acceptance import Choice, Rule, Sampler
from .attention import Segment, paged_attend
from .buffers import InputBuffers, StepInputs
from .drafting import Proposal, ngram_propose
from .models import MASK_TOKEN, PAD_TOKEN, ModelSpec, TinyLM
from .paged_kv import PagedKVCache, slot_mapping


@dataclass(frozen=True)
class Placement:
    """One request's segment of the step's layout: rows ``start..start+target_rows+draft_rows-1``."""

    request_id: str
    start: int
    target_rows: int
    draft_rows: int
    first_position: int  # computed tokens before the step
    inputs: list[int]  # token of each target row
    drafts: list[int]  # the scheduled drafts it verifies (no placeholders)
    last_known: int  # target row of the last known token: verification starts there
    samples: bool  # all known tokens are computed after this step

    @property
    def end(self) -> int:
        return self.start + self.target_rows + self.draft_rows


@dataclass(frozen=True)
class StepExecution:
    """What one executed step did: rows per request, drafts verified and accepted."""

    step: int
    rows: dict[str, int]
    accepted: dict[str, int]  # drafts accepted (as applied) per request that verified any
    verified: int  # drafts the target verified
    matched: int  # of those, accepted by the runner's own rule
    committed: int  # tokens the step appended to sequences
    kv_written: dict[str, tuple[int, ...]] = field(default_factory=dict)  # positions written, per request, ascending


@dataclass(frozen=True)
class _DraftRows:
    """Rows of one drafter pass for one request: tokens at positions, written from ``row`` on;
    KV is stored for positions below ``stored_until``."""

    request_id: str
    row: int
    positions: list[int]
    tokens: list[int]
    stored_until: int


class ModelRunner:
    """Runs steps on ``device``. ``drafter`` is the method's (``methods.drafter``): None
    without speculation, n-gram matching, or the early-exit model drafter. ``growable_inputs``
    lets a step allocate more than B rows (see InputBuffers)."""

    def __init__(self, limits: StepLimits, drafter: str | None, spec: ModelSpec, device: torch.device | str = "cpu",
                 rule: Rule = "greedy", seed: int = 0, growable_inputs: bool = False) -> None:
        self.limits = limits
        self.k, self.d = limits.num_speculative_tokens, limits.draft_slots
        self.drafter = drafter
        # positions a model drafter runs from the new last token: L, and k at least to propose k drafts
        self.draft_span = max(self.k, limits.lookahead)
        self.stored_span = limits.lookahead  # of those, the first L store their KV
        self.device = torch.device(device)
        self.model = TinyLM(spec, self.device)
        self.cache = PagedKVCache(spec.num_layers, limits.num_kv_blocks, limits.block_size, spec.num_heads,
                                  spec.head_dim, self.device)
        self.buffers = InputBuffers(limits.max_num_batched_tokens, self.device, growable_inputs)
        self.sampler = Sampler(rule, seed)
        self.tokens: dict[str, list[int]] = {}  # live requests: prompt, then committed tokens
        self.proposals: dict[str, Proposal] = {}
        self.finished: dict[str, list[int]] = {}  # the tokens of requests that left the queues

    def add_request(self, request_id: str, prompt: Sequence[int]) -> None:
        self.tokens[request_id] = list(prompt)

    def drop(self, request_id: str) -> None:
        """Forget a request that finished or was aborted, keeping its tokens in ``finished``."""
        if request_id in self.tokens:
            self.finished[request_id] = self.tokens.pop(request_id)
        self.proposals.pop(request_id, None)

    def execute(self, record: StepRecord, forced: Mapping[str, int] | None = None) -> StepExecution:
        """Execute one step; ``forced`` (forced mode) sets the accepted drafts per request.
        Raises InputRowsOverflow or KVOverflow, before the buffers or the cache are written."""
        with torch.inference_mode():
            return self._execute(record, forced)

    # -- the step ---------------------------------------------------------------------
    def _execute(self, record: StepRecord, forced: Mapping[str, int] | None) -> StepExecution:
        for rid in set(self.tokens) - set(record.running) - set(record.waiting):
            self.drop(rid)  # finished or aborted
        paused = {rid: 0 for rid in record.paused}  # a paused decode runs 0 rows and keeps its state
        assert not paused.keys() & record.num_scheduled_tokens.keys(), f"step {record.step}: a paused decode is granted"
        assert paused.keys() <= set(self.tokens), f"step {record.step}: paused {sorted(paused)} are not live here"
        placements = self._layout(record)
        if not placements:
            return StepExecution(record.step, paused, {}, 0, 0, 0)
        rows = self.buffers.claim(record.step, sum(p.end - p.start for p in placements))
        tables = [record.block_tables[p.request_id] for p in placements]
        self.cache.reserve(max((max(t) + 1 for t in tables if t), default=0))
        contexts = [self._slots(record, p.request_id, range(p.first_position + p.target_rows)) for p in placements]
        written = {p.request_id: set(range(p.first_position, p.first_position + p.target_rows)) for p in placements}
        self._write_target_rows(rows, placements, contexts)
        hidden, offsets = self._target_pass(rows, placements, contexts)

        sampling = [(p, off) for p, off in zip(placements, offsets) if p.samples]
        index = [off + p.last_known + i for p, off in sampling for i in range(len(p.drafts) + 1)]
        logits = self.model.logits(hidden[torch.tensor(index, dtype=torch.long, device=self.device)])
        accepted: dict[str, int] = {}
        verified = matched = committed = 0
        row = 0
        for p, _ in sampling:
            n = len(p.drafts) + 1
            proposal = self.proposals.get(p.request_id)
            q = proposal.probs[: n - 1] if proposal is not None and proposal.probs is not None and p.drafts else None
            forced_here = None if forced is None else forced.get(p.request_id, 0)
            v = self.sampler.verify(logits[row:row + n], p.drafts, q, forced_here)
            row += n
            self.tokens[p.request_id].extend(v.tokens)
            committed += len(v.tokens)
            if p.drafts:
                accepted[p.request_id] = v.applied
                verified += len(p.drafts)
                matched += v.own
        self._propose(record, rows, [p for p, _ in sampling], written)
        return StepExecution(record.step, {**record.runner_rows, **paused}, accepted, verified, matched, committed,
                             {rid: tuple(sorted(positions)) for rid, positions in written.items()})

    def _layout(self, record: StepRecord) -> list[Placement]:
        placements, start = [], 0
        for rid, grant in record.num_scheduled_tokens.items():
            tokens = self.tokens[rid]
            n, first = record.num_tokens[rid], record.computed_before[rid]
            del tokens[n:]  # the scheduler kept only this many (a finishing step may commit fewer)
            scheduled = 0 if rid in record.padded else record.scheduled_draft_tokens.get(rid, 0)
            drafts = self.proposals[rid].tokens[:scheduled] if scheduled else []
            assert len(drafts) == scheduled, f"step {record.step}: {rid!r} has {len(drafts)} of {scheduled} drafts"
            target_rows = record.runner_rows[rid] - self.d
            assert target_rows >= grant, f"step {record.step}: {rid!r} is granted {grant} tokens in {target_rows} rows"
            inputs = [tokens[q] if q < n else drafts[q - n] if q - n < len(drafts) else PAD_TOKEN
                      for q in range(first, first + target_rows)]
            last_known = n - 1 - first
            samples = first + grant >= n
            assert not samples or last_known + len(drafts) < target_rows, f"step {record.step}: {rid!r} rows"
            placements.append(Placement(rid, start, target_rows, self.d, first, inputs, drafts, last_known, samples))
            start += target_rows + self.d
        return placements

    def _slots(self, record: StepRecord, request_id: str, positions: Sequence[int]) -> Tensor:
        return slot_mapping(record.step, request_id, record.block_tables[request_id],
                            torch.tensor(positions, dtype=torch.long), record.limits.block_size)

    def _write_target_rows(self, rows: StepInputs, placements: list[Placement], contexts: list[Tensor]) -> None:
        total = rows.token_ids.shape[0]
        ids = torch.full((total,), PAD_TOKEN, dtype=torch.long)
        positions = torch.zeros(total, dtype=torch.long)
        slots = torch.full((total,), -1, dtype=torch.long)
        for p, context in zip(placements, contexts):
            span = slice(p.start, p.start + p.target_rows)
            ids[span] = torch.tensor(p.inputs, dtype=torch.long)
            positions[span] = torch.arange(p.first_position, p.first_position + p.target_rows)
            slots[span] = context[p.first_position:]
        rows.token_ids.copy_(ids)
        rows.positions.copy_(positions)
        rows.slots.copy_(slots)

    def _target_pass(self, rows: StepInputs, placements: list[Placement],
                     contexts: list[Tensor]) -> tuple[Tensor, list[int]]:
        """Hidden states of the target rows (in layout order) and each placement's offset among them."""
        index: list[int] = []
        segments, offsets = [], []
        for p, context in zip(placements, contexts):
            offsets.append(len(index))
            segments.append(Segment(len(index), len(index) + p.target_rows, context.to(self.device)))
            index.extend(range(p.start, p.start + p.target_rows))
        rows_index = torch.tensor(index, dtype=torch.long, device=self.device)
        positions = rows.positions[rows_index]
        attend = paged_attend(self.cache, rows.slots[rows_index], positions, segments)
        hidden = self.model.hidden(rows.token_ids[rows_index], positions, attend, self.model.spec.num_layers)
        return hidden, offsets

    # -- drafting ---------------------------------------------------------------------
    def _propose(self, record: StepRecord, rows: StepInputs, placements: list[Placement],
                 written: dict[str, set[int]]) -> None:
        if self.drafter == NGRAM_DRAFTER:
            for p in placements:
                self.proposals[p.request_id] = Proposal(ngram_propose(self.tokens[p.request_id], self.k))
        elif self.drafter == MODEL_DRAFTER and placements:
            self._draft_with_model(record, rows, placements, written)

    def _draft_with_model(self, record: StepRecord, rows: StepInputs, placements: list[Placement],
                          written: dict[str, set[int]]) -> None:
        """Parallel first pass (new last token + mask rows), then serial passes to k drafts and
        the L positions the method's drafter writes; the drafts past the k-th are dropped."""
        max_len = record.limits.max_model_len
        parallel = first_pass_drafts(self.d, self.k) - 1  # mask rows after the new last token
        last = {p.request_id: len(self.tokens[p.request_id]) - 1 for p in placements}
        first = []
        for p in placements:
            positions = [q for q in range(last[p.request_id], last[p.request_id] + 1 + parallel) if q < max_len]
            tokens = [self.tokens[p.request_id][-1]] + [MASK_TOKEN] * (len(positions) - 1)
            first.append(_DraftRows(p.request_id, p.end - len(positions), positions, tokens,
                                    last[p.request_id] + self.stored_span))
        drafts: dict[str, list[int]] = {p.request_id: [] for p in placements}
        probs: dict[str, list[Tensor]] = {p.request_id: [] for p in placements}
        start = {p.request_id: p.start for p in placements}
        batch = first
        while batch:
            choice = self._drafter_pass(record, rows, batch)
            at = 0
            for entry in batch:
                n = len(entry.positions)
                written[entry.request_id].update(q for q in entry.positions if q < entry.stored_until)
                drafts[entry.request_id] += choice.tokens[at:at + n]
                if choice.probs is not None:
                    probs[entry.request_id] += list(choice.probs[at:at + n])
                at += n
            batch = [_DraftRows(rid, start[rid], [last[rid] + len(ts)], [ts[-1]], last[rid] + self.stored_span)
                     for rid, ts in drafts.items() if len(ts) < self.draft_span and last[rid] + len(ts) < max_len]
        for p in placements:
            rid = p.request_id
            tokens = (drafts[rid] + [PAD_TOKEN] * self.k)[: self.k]  # positions past max_model_len are never scheduled
            kept = probs[rid][: self.k]
            self.proposals[rid] = Proposal(tokens, torch.stack(kept) if kept else None)

    def _drafter_pass(self, record: StepRecord, rows: StepInputs, batch: list[_DraftRows]) -> Choice:
        """Write the batch's rows into the step's buffers, run the drafter's layers over them
        (storing their KV below each entry's ``stored_until``) and choose one token per row."""
        index: list[int] = []
        segments: list[Segment] = []
        for entry in batch:
            unstored = entry.positions[-1] >= entry.stored_until
            assert all(q < entry.stored_until for q in entry.positions[:-1]), entry  # L >= k - 1: at most the last
            context = self._slots(record, entry.request_id, range(entry.positions[-1] + 1 - unstored))
            span = slice(entry.row, entry.row + len(entry.positions))
            rows.token_ids[span] = torch.tensor(entry.tokens, dtype=torch.long, device=self.device)
            rows.positions[span] = torch.tensor(entry.positions, dtype=torch.long, device=self.device)
            own = context[entry.positions[:len(entry.positions) - unstored]]
            rows.slots[span] = torch.cat([own, torch.full((int(unstored),), -1, dtype=torch.long)]).to(self.device)
            segments.append(Segment(len(index), len(index) + len(entry.positions), context.to(self.device), unstored))
            index.extend(range(span.start, span.stop))
        rows_index = torch.tensor(index, dtype=torch.long, device=self.device)
        positions = rows.positions[rows_index]
        attend = paged_attend(self.cache, rows.slots[rows_index], positions, segments)
        hidden = self.model.hidden(rows.token_ids[rows_index], positions, attend, self.model.spec.draft_layers)
        return self.sampler.choose(self.model.logits(hidden))
