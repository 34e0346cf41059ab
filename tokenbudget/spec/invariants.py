"""The named invariants, each judged by one pure predicate, and their registry.

A predicate returns what broke, one ``(step, message)`` pair per violation (empty when it
holds); the registry entry (``Invariant``, which is what the predicate's name holds)
turns those into Violations of its id. ``kind`` says what an invariant judges:

- ``ledger``: a StepRecord's budget ledger, the arithmetic a budget policy controls;
- ``step``: a StepRecord, beyond the ledger (the engine's loop, the KV pool);
- ``run``: a RunRecord;
- ``config``: a ConfigProbe;
- ``efficiency``: a StepRecord, measured (a work gap), never judged.

The ids are stable (output, docs, the manifest and traces use them); ``INVARIANTS`` is their
one table, from which the step and run checks, the prover's groups and a user policy's rules derive.
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from itertools import chain, count
from typing import Any, Callable, Mapping, Optional

from . import grant_rules, kv_groups
from .queue_ids import WaitingTally
from .records import RequestState, RunRecord, StepLimits, StepOutcome, StepRecord

LEDGER, STEP, RUN, CONFIG, EFFICIENCY = "ledger", "step", "run", "config", "efficiency"
POLICY_ERROR = "policy-error"  # the verdict on a user policy whose own method failed: not a model-error
KINDS = (LEDGER, STEP, RUN, CONFIG, EFFICIENCY)

Breach = tuple[Optional[int], str]  # (step, what broke) of one violation; no step for a config


@dataclass(frozen=True)
class Violation:
    invariant: str
    step: Optional[int]
    message: str

    def __str__(self) -> str:
        where = f"step {self.step}: " if self.step is not None else ""
        return f"{self.invariant}: {where}{self.message}"


@dataclass(frozen=True)
class ConfigProbe:
    """Whether a policy's validation accepted a config, and what a probe run showed.

    ``first_step_grants`` is the total granted by the first step of one request in an
    empty system; ``safety_violations`` the invariant ids a probe workload broke when
    run with validation bypassed.
    """

    accepted: bool
    first_step_grants: int
    safety_violations: tuple[str, ...] = ()


@dataclass(frozen=True)
class Invariant:
    """One registry entry; calling it judges what its ``kind`` names. ``liveness``: a
    hang, not a crash. ``per_grant``: a property of each grant decision alone (the prover
    checks it at every grant step). ``engine_only``: it holds of every model run, so the
    prover and the check matrix leave it out. ``run_predicate``: a step invariant's other half,
    judged on the whole run (``over_run``, in ``check_run``)."""

    id: str
    kind: str
    holds_when: str
    predicate: Callable[[Any], list[Breach]]
    liveness: bool = False
    per_grant: bool = False
    run_predicate: Optional[Callable[[RunRecord], list[Breach]]] = None
    engine_only: bool = False  # about inputs the reference model never makes (multimodal): judged on real engines only

    def __post_init__(self) -> None:
        assert self.kind in KINDS, self.kind
        assert self.run_predicate is None or self.kind == STEP, self.id

    def __call__(self, observed: Any) -> list[Violation]:
        return self._violations(self.predicate(observed))

    def over_run(self, run: RunRecord) -> list[Violation]:
        return self._violations(self.run_predicate(run)) if self.run_predicate else []

    def _violations(self, breaches: list[Breach]) -> list[Violation]:
        return [Violation(self.id, step, message) for step, message in breaches]


Predicate = Callable[[Any], list[Breach]]


def invariant(id: str, kind: str, holds_when: str, **facts: Any) -> Callable[[Predicate], Invariant]:
    """Make the decorated predicate the registry entry ``id``."""
    return lambda predicate: Invariant(id, kind, holds_when, predicate, **facts)


# -- step invariants ------------------------------------------------------------------
@invariant("input-budget-nonnegative", LEDGER, "the input budget is >= 0 at every ledger point")
def input_budget_nonnegative(rec: StepRecord) -> list[Breach]:
    out = []
    if rec.initial_input_budget is not None and rec.initial_input_budget < 0:
        out.append((rec.step, f"initial input budget {rec.initial_input_budget}"))
    for e in rec.ledger or ():
        if e.input_after is not None and e.input_after < 0:
            out.append((rec.step,
                        f"input budget {e.input_after} after the {e.kind} of {e.tokens} to {e.request_id}"))
    return out


@invariant("token-cap", LEDGER, "the sum of grants is <= T")
def token_cap(rec: StepRecord) -> list[Breach]:
    total, cap = rec.total_scheduled_tokens, rec.limits.max_num_scheduled_tokens
    if total > cap:
        return [(rec.step, f"{total} tokens scheduled, T = {cap}")]
    return []


@invariant("input-rows-cap", LEDGER, "the sum over scheduled requests of their physical runner rows (target rows + "
           "draft slots, from the method table) is <= B")
def input_rows_cap(rec: StepRecord) -> list[Breach]:
    rows, cap = rec.total_runner_rows, rec.limits.max_num_batched_tokens
    if rows > cap:
        charged = _live_charges(rec)
        told = "" if charged is None else f"; the policy charged {charged}"
        return [(rec.step,
                 f"the runner needs {rows} rows, B = {cap} "
                 f"({rec.total_scheduled_tokens} tokens + {rows - rec.total_scheduled_tokens} extra rows{told})")]
    return []


def _live_charges(rec: StepRecord) -> Optional[int]:
    """What the ledger charged the scheduled requests' live grants: the input budget where
    the policy keeps one, else the token budget (None without a ledger)."""
    if not rec.ledger:
        return None
    live: dict[str, int] = {}
    for e in rec.ledger:
        before, after = ((e.input_before, e.input_after) if e.input_before is not None and e.input_after is not None
                         else (e.token_before, e.token_after))
        if e.kind == "grant":
            live[e.request_id] = before - after
        else:
            live.pop(e.request_id, None)
    return sum(charge for rid, charge in live.items() if rid in rec.num_scheduled_tokens)


@invariant("exact-refund", LEDGER,
           "a same-step preemption returns exactly what the grant charged; budgets = initial - live charges")
def exact_refund(rec: StepRecord) -> list[Breach]:
    if rec.ledger is None:
        return []
    out = []
    token, inp = rec.initial_token_budget, rec.initial_input_budget
    live: dict[str, tuple[int, int]] = {}
    for e in rec.ledger:
        if (e.token_before, e.input_before) != (token, inp):
            out.append((rec.step,
                        f"budgets jumped from ({token}, {inp}) to ({e.token_before}, {e.input_before}) "
                        f"before the {e.kind} of {e.request_id}"))
        d_token = e.token_after - e.token_before
        d_input = 0 if e.input_after is None or e.input_before is None else e.input_after - e.input_before
        if e.kind == "grant":
            live[e.request_id] = (-d_token, -d_input)
        elif e.request_id not in live:
            out.append((rec.step, f"refund to {e.request_id}, which holds no grant"))
        else:
            charged = live.pop(e.request_id)
            if (d_token, d_input) != charged:
                out.append((rec.step,
                            f"preempting {e.request_id} returned (token {d_token}, input {d_input}) "
                            f"but its grant of {e.tokens} charged (token {charged[0]}, input {charged[1]})"))
        token, inp = e.token_after, e.input_after
    return out


@invariant("seq-cap", LEDGER, "running requests <= S")
def seq_cap(rec: StepRecord) -> list[Breach]:
    if len(rec.running) > rec.limits.max_num_seqs:
        return [(rec.step, f"{len(rec.running)} running, S = {rec.limits.max_num_seqs}")]
    return []


def _writer(lim: StepLimits) -> str:
    """Who writes the last KV slot of a step: the drafter, when it writes past the target rows."""
    if not lim.lookahead:
        return "the step"
    return f"the {lim.method} drafter" if lim.method else "the drafter"


def _need_terms(computed: int, grant: int, target_rows: int, lookahead: int, need: int, max_model_len: int) -> str:
    """The terms of a KV need, for a message: computed + granted (+ rows run past the grant) + the
    drafter's writes past them."""
    terms = f"computed {computed} + granted {grant}"
    if target_rows != grant:
        terms += f" + {target_rows - grant} rows the runner runs past the grant"
    terms += f" + drafter {lookahead}"
    return terms + (f", capped at max_model_len {max_model_len}" if need == max_model_len else "")


@invariant("kv-capacity", STEP, "blocks in use <= pool; a scheduled request holds the KV slots it physically writes "
           "(computed + target rows + the L the drafter writes past them, from the method table), in every KV cache "
           "group from the slot its kind keeps on; no block owned twice outside a shared prefix")
def kv_capacity(rec: StepRecord) -> list[Breach]:
    lim = rec.limits
    out = []
    if rec.kv_blocks_in_use > lim.num_kv_blocks:
        out.append((rec.step, f"{rec.kv_blocks_in_use} blocks in use, pool {lim.num_kv_blocks}"))
    if rec.kv_groups:
        for group, tables, starts in rec.kv_groups:
            out += _group_holds_its_need(rec, group, tables, starts)
            out += _owned_twice(rec.step, _null_blocks_apart(tables, group.null_block), rec.block_keys)
        return out
    computed_before, block_tables, runner_rows = rec.computed_before, rec.block_tables, rec.runner_rows
    d, lookahead, max_model_len, block_size = lim.draft_slots, lim.lookahead, lim.max_model_len, lim.block_size
    for rid, grant in rec.num_scheduled_tokens.items():
        target_rows = runner_rows[rid] - d if rid in runner_rows else grant
        need = grant_rules.kv_slots_needed(computed_before[rid], target_rows, lookahead, max_model_len)
        held = len(block_tables.get(rid, ())) * block_size
        if held < need:
            terms = _need_terms(computed_before[rid], grant, target_rows, lookahead, need, max_model_len)
            out.append((rec.step, f"{rid} holds {held} KV slots but {_writer(lim)} writes to {need} ({terms})"))
    return out + _owned_twice(rec.step, block_tables, rec.block_keys)


def _group_holds_its_need(rec: StepRecord, group: kv_groups.KvGroup, tables: Mapping[str, tuple[int, ...]],
                          starts: Mapping[str, int]) -> list[Breach]:
    """Each scheduled request's table in ``group`` holds the slots the step writes, in real blocks
    from the first slot the group's kind keeps, or its KV's start (``kv_groups.shortfall``)."""
    lim, out = rec.limits, []
    for rid, grant in rec.num_scheduled_tokens.items():
        computed = rec.computed_before[rid]
        target_rows = rec.runner_rows[rid] - lim.draft_slots if rid in rec.runner_rows else grant
        lookahead = lim.lookahead if kv_groups.KINDS[group.kind].drafter_writes else 0
        need = grant_rules.kv_slots_needed(computed, target_rows, lookahead, lim.max_model_len)
        writer = _writer(lim) if lookahead else "the step"
        short = kv_groups.shortfall(group, tables.get(rid, ()), computed, need, writer, starts.get(rid, 0))
        if short is not None:
            terms = _need_terms(computed, grant, target_rows, lookahead, need, lim.max_model_len)
            out.append((rec.step, f"{rid} {short} ({terms})"))
    return out


def _null_blocks_apart(tables: Mapping[str, tuple[int, ...]], null: Optional[int]) -> Mapping[str, tuple[int, ...]]:
    """``tables`` with each null block entry made a distinct negative id: a freed slot is no block owned."""
    if null is None:
        return tables
    fresh = count(-1, -1)
    return {rid: tuple(next(fresh) if b == null else b for b in table) if null in table else table
            for rid, table in tables.items()}


def _owned_twice(step: int, block_tables: Mapping[str, tuple[int, ...]], block_keys: Mapping[int, object]
                 ) -> list[Breach]:
    """A block in two tables (or twice in one) that is not a shared prefix block (a content key,
    at one index in every table holding it)."""
    if _held_twice_only_as_shared_prefix(block_tables, block_keys):
        return []
    seen: set[int] = set()
    twice: set[int] = set()
    for table in block_tables.values():
        blocks = set(table)
        if len(blocks) < len(table):
            twice.update(block for block, times in Counter(table).items() if times > 1)
        twice |= seen & blocks
        seen |= blocks
    if not twice:
        return []
    out = []
    owner: dict[int, tuple[str, int]] = {}
    for rid, table in block_tables.items():
        if twice.isdisjoint(table):
            continue
        for index, block in enumerate(table):
            if block not in twice:
                continue  # held once: nothing to judge
            first = owner.setdefault(block, (rid, index))
            if first[0] == rid and first[1] == index:
                continue
            if block not in block_keys or first[1] != index:
                out.append((step, f"block {block} is owned by {first[0]} and {rid} without a shared prefix"))
    return out


def _held_twice_only_as_shared_prefix(block_tables: Mapping[str, tuple[int, ...]],
                                      block_keys: Mapping[int, object]) -> bool:
    """Whether every block held more than once is a shared-prefix block (``block_keys``) at
    one index in every table that holds it, so that the ownership walk would find nothing.
    Linear in the blocks held: each table is read once, in C, and only the keyed blocks
    it shares are looked at one by one; a step where no block is held twice (no prefix
    shared) costs one set of every block held."""
    tables = block_tables.values()
    if len(set(chain.from_iterable(tables))) == sum(map(len, tables)):
        return True
    keyed = block_keys.keys()
    index_of: dict[int, int] = {}  # keyed block -> its index in the tables that hold it
    seen: set[int] = set()
    for table in tables:
        places = dict(zip(table, range(len(table))))
        if len(places) < len(table):
            return False  # a block twice in one table
        shared = places.keys() & keyed
        for block in shared:
            if index_of.setdefault(block, places[block]) != places[block]:
                return False
        if not (places.keys() & seen) <= shared:
            return False  # an unkeyed block held before
        seen.update(places)
    return True


@invariant("model-len", STEP, "computed + granted + sampled (1; 0 for pooling) <= max_model_len", per_grant=True)
def model_len(rec: StepRecord) -> list[Breach]:
    out = []
    max_len, headroom, sampled = rec.limits.max_model_len, rec.limits.context_headroom, rec.limits.sampled_tokens
    for rid, grant in rec.num_scheduled_tokens.items():
        if not grant_rules.fits_model_len(rec.computed_before[rid], grant, max_len + headroom, sampled):
            past = f" + the engine's headroom {headroom}" if headroom else ""
            out.append((rec.step, f"{rid}: computed {rec.computed_before[rid]} + granted {grant} + {sampled} sampled "
                                  f"> max_model_len {max_len}{past}"))
        held = len(rec.block_tables.get(rid, ()))
        if headroom and rec.limits.block_size == 1 and held > max_len + headroom:  # a page of 1: blocks are positions
            out.append((rec.step, f"{rid} holds {held} KV positions, past its table row of max_model_len {max_len} "
                                  f"+ the engine's headroom {headroom}"))
    return out


@invariant("spec-shape", STEP, "drafts <= k; a padded decode gets exactly 1 + k rows; prefill chunks carry no drafts",
           per_grant=True)
def spec_shape(rec: StepRecord) -> list[Breach]:
    k = rec.limits.num_speculative_tokens
    out = []
    for rid, drafts in rec.scheduled_draft_tokens.items():
        if not grant_rules.drafts_within_k(drafts, k):
            out.append((rec.step, f"{rid} scheduled {drafts} drafts, k = {k}"))
        if not grant_rules.prefill_without_drafts(drafts, rid in rec.prefill):
            out.append((rec.step, f"prefill chunk of {rid} carries {drafts} drafts"))
    for rid in rec.padded:
        if not grant_rules.padded_shape(rec.num_scheduled_tokens[rid], rec.scheduled_draft_tokens.get(rid, 0), k):
            out.append((rec.step, f"padded decode {rid} got {rec.num_scheduled_tokens[rid]} rows with "
                                  f"{rec.scheduled_draft_tokens.get(rid, 0)} drafts, not 1 + k = {1 + k}"))
    return out


@invariant("placeholder-fresh", STEP, "a request's scheduled drafts are real drafts, padding, or the placeholders "
           "made for this step, never placeholders left from an earlier step")
def placeholder_fresh(rec: StepRecord) -> list[Breach]:
    return [(rec.step, f"{rid} scheduled {rec.scheduled_draft_tokens.get(rid, 0)} placeholder drafts made for an "
                       f"earlier step (it was not scheduled in the step before)") for rid in sorted(rec.stale_drafts)]


@invariant("encoder-cap", STEP, "encoder embeddings computed in a step <= the encoder compute budget; the encoder "
           "cache holds <= its size", engine_only=True)
def encoder_cap(rec: StepRecord) -> list[Breach]:
    if not rec.encoder_inputs and not rec.encoder_cache_used:
        return []
    lim = rec.limits
    out: list[Breach] = []
    computed = sum(e.embeds for e in rec.encoder_inputs if e.scheduled)
    if computed > lim.encoder_compute_budget:
        inputs = ", ".join(f"{e.request_id}[{e.index}] {e.embeds}" for e in rec.encoder_inputs if e.scheduled)
        out.append((rec.step, f"the encoder computes {computed} embeddings ({inputs}), "
                              f"encoder budget {lim.encoder_compute_budget}"))
    if rec.encoder_cache_used > lim.encoder_cache_size:
        out.append((rec.step, f"the encoder cache holds {rec.encoder_cache_used} embeddings, "
                              f"size {lim.encoder_cache_size}"))
    return out


@invariant("encoder-ready", STEP, "a grant reaches an encoder input's embeddings only when the input is encoded in "
           "the step or its output is in the encoder cache", engine_only=True)
def encoder_ready(rec: StepRecord) -> list[Breach]:
    if not rec.encoder_inputs:
        return []
    encoded = {e.key for e in rec.encoder_inputs if e.scheduled}
    return [(rec.step, f"{e.request_id} is granted {e.embeds_in_grant} embeddings of encoder input {e.index} "
                       f"({e.key}), which is neither encoded in the step nor in the encoder cache")
            for e in rec.encoder_inputs
            if e.embeds_in_grant and e.key not in encoded and e.key not in rec.encoder_held]


@invariant("model-error", STEP, "the scheduler's pass and its output update raise no exception "
           "(a user policy's own method failing is a policy-error instead)")
def model_error(rec: StepRecord) -> list[Breach]:
    if rec.error is not None and POLICY_ERROR + ":" not in rec.error:
        return [(rec.step, f"the {rec.raised_by} raised {rec.error}")]
    return []


# -- run invariants -------------------------------------------------------------------
class RequestAccounting:
    """``no-request-lost`` judged as the run goes: ``feed`` takes the events of a RunRecord
    not yet seen, in order, and returns what broke in them. A step costs its running queue,
    its outcome and what changed in its waiting queue (``WaitingTally``), not every request
    ever added; only a step that breaks it walks its queues to name each breach. Every id
    added or reported keeps its status and computed tokens (a few ints), no record.

    A target whose steps do not come as a record with its outcome (vLLM's ``AsyncScheduler``
    schedules step N + 1 before step N's output is applied; a request preempted or finished
    between steps) feeds the events one by one instead: ``add``, ``queued`` (a pass's
    record), ``applied`` (a step's outcome), ``ended`` and ``preempted`` outside a pass.

    A live request that the step's outcome reports aborted was aborted by the engine in
    that step (SGLang's ``retract_decode`` aborting the last decode): it leaves the queues
    as an outcome of the step, before they are checked, never as a lost request."""

    def __init__(self) -> None:
        self.status: dict[str, str] = {}  # id -> live | finished | aborted
        self.place: dict[str, int] = {}  # id -> when it was first seen: "in no queue" is reported in this order
        self.live: dict[str, int] = {}  # the live ids -> their place
        self.computed: dict[str, int] = {}
        self.last_drafts: dict[str, int] = {}  # id -> drafts scheduled the last time a step scheduled it
        self.waiting = WaitingTally(self.live)  # the waiting ids, tallied as they change
        self.seen_events = 0

    def feed(self, run: RunRecord) -> list[Breach]:
        out: list[Breach] = []
        events = run.events
        while self.seen_events < len(events):
            event, arg = events[self.seen_events]
            self.seen_events += 1
            if event == "add":
                self.add(str(arg))
            elif event == "abort":
                self.abort(str(arg))
            else:
                index = int(arg)  # type: ignore[call-overload]
                out += self.step(run.steps[index], run.outcomes[index] if index < len(run.outcomes) else None)
        return out

    def add(self, rid: str) -> None:
        self._set(rid, "live")

    def abort(self, rid: str) -> None:
        if self.status.get(rid) == "live":
            self._set(rid, "aborted")

    def _set(self, rid: str, status: str) -> None:
        self.place.setdefault(rid, len(self.place))
        self.status[rid] = status
        was_live = rid in self.live
        if status == "live":
            self.live[rid] = self.place[rid]
        else:
            self.live.pop(rid, None)
        if was_live != (status == "live"):
            self.waiting.liveness_changed(rid, not was_live)

    def step(self, rec: StepRecord, outcome: Optional[StepOutcome]) -> list[Breach]:
        """One step's record and outcome (None when the target gave none)."""
        if outcome is not None:
            self.engine_aborted(outcome)
        out = self.queued(rec)
        if outcome is not None:
            grants = rec.num_scheduled_tokens
            late = {rid: max(0, self.last_drafts.get(rid, 0) - grants.get(rid, 0)) for rid in outcome.requests}
            out += self.applied(rec.step, outcome, late)
        self.last_drafts.update(rec.scheduled_draft_tokens)
        return out

    def engine_aborted(self, outcome: StepOutcome) -> None:
        """The live requests the outcome reports aborted: the engine aborted them in its step."""
        for rid, state in outcome.requests.items():
            if state.status == "aborted" and self.status.get(rid) == "live":
                self._set(rid, "aborted")

    def ended(self, rid: str, status: str) -> None:
        """A live request finished or was aborted outside a step (``status``: finished | aborted)."""
        if self.status.get(rid) == "live":
            self._set(rid, status)

    def preempted(self, rid: str) -> None:
        """A request was preempted (inside a pass, or outside one, as vLLM's ``reset_prefix_cache``
        does): its computed tokens may go back in the next outcome that reports it."""
        self.computed.pop(rid, None)

    def queued(self, rec: StepRecord) -> list[Breach]:
        """The queues after a pass: every live request in exactly one, nothing else queued."""
        out: list[Breach] = []
        status, live, running, waiting = self.status, self.live, rec.running, self.waiting
        waiting.take(rec.waiting)
        queued_once = (waiting.surplus == 0 and waiting.stale == 0 and len(set(running)) == len(running)
                       and len(waiting.counts) + len(running) == len(live)
                       and all(rid in live and rid not in waiting.counts for rid in running))
        if not queued_once:  # some live request is in no queue, or some id queued twice or not live: name each
            queued = running + tuple(rec.waiting)
            seen = set()
            for rid in queued:
                if rid in seen:
                    out.append((rec.step, f"{rid} is queued twice"))
                seen.add(rid)
                if status.get(rid) != "live":
                    out.append((rec.step, f"{rid} is queued but {status.get(rid, 'was never added')}"))
            if len(seen) < len(self.live) or not seen.issuperset(self.live):
                missing = sorted((rid for rid in self.live if rid not in seen), key=self.live.__getitem__)
                out += [(rec.step, f"{rid} is in no queue") for rid in missing]
        return out

    def applied(self, step: int, outcome: StepOutcome, late: Mapping[str, int] | None = None) -> list[Breach]:
        """A step's output applied: outputs within max_tokens, no way back from finished or
        aborted, computed tokens back only by a preemption (this step's or one noted before),
        or by ``late[id]``: the drafts of an output applied one step late (SPEC.md §14),
        rolled back, less the grant the step gave beside them."""
        out: list[Breach] = []
        status, computed = self.status, self.computed
        late = late or {}
        for rid, state in outcome.requests.items():
            rolled_back = late.get(rid, 0)
            if state.num_output_tokens > state.max_tokens:
                out.append((step, f"{rid} has {state.num_output_tokens} outputs, max_tokens {state.max_tokens}"))
            expected = status.get(rid)
            if expected in ("finished", "aborted") and state.status != expected:
                out.append((step, f"{rid} was {expected}, now {state.status}"))
            if state.status in ("finished", "aborted"):
                self._set(rid, state.status)
            elif rid in computed and state.num_computed_tokens < computed[rid] - rolled_back \
                    and rid not in outcome.preempted:
                out.append((step, f"{rid}'s computed tokens went back from {computed[rid]} to "
                                  f"{state.num_computed_tokens} without preemption"))
            computed[rid] = state.num_computed_tokens
        return out


@invariant("no-request-lost", RUN, "every added request is in exactly one of waiting, running, finished, aborted; "
           "outputs <= max_tokens; computed tokens only go back by preemption")
def no_request_lost(run: RunRecord) -> list[Breach]:
    return RequestAccounting().feed(run)


# -- liveness: progress, a step half and a run half -----------------------------------------
def drain_bound(requests: Mapping[str, RequestState]) -> int:
    """Steps within which, with no new arrivals, every unfinished request must finish:
    twice its remaining prompt and output tokens (room for recomputes), plus slack."""
    live = [s for s in requests.values() if s.status in ("waiting", "running")]
    return 2 * sum(s.num_prompt_tokens + s.max_tokens for s in live) + 2 * len(live) + 8


SMALLEST_DRAIN_BOUND = drain_bound({})  # every drain's bound is at least this


def _current_drain(run: RunRecord) -> tuple[list[int], int, dict[str, RequestState]]:
    """The steps after the run's last add or abort, the drain's bound (from the request
    states as it began) and the request states at its end; no steps: ([], 0, {})."""
    last_op = max((i for i, (e, _) in enumerate(run.events) if e != "step"), default=-1)
    drain = [int(a) for e, a in run.events[last_op + 1:] if e == "step" and int(a) < len(run.outcomes)]  # type: ignore[call-overload]
    if not drain:
        return [], 0, {}
    states = dict(run.added)
    for outcome in run.outcomes[: max(drain[0], 1)]:
        states.update(outcome.requests)
    bound = drain_bound(states)
    for outcome in run.outcomes[max(drain[0], 1): drain[-1] + 1]:
        states.update(outcome.requests)
    return drain, bound, states


def drain_steps_left(run: RunRecord) -> int:
    """How many more steps the run's drain (begun: at least one step) may take before
    ``progress_bound`` judges it; 0 when it judges it now."""
    drain, bound, _ = _current_drain(run)
    assert drain, "the drain has not begun"
    return max(0, bound - len(drain))


def progress_bound(run: RunRecord) -> list[Breach]:
    """The bound of ``progress``'s run half: a drain (steps after the last add or abort)
    longer than the bound leaves nothing. It catches the livelocks that are not fixpoints."""
    drain, bound, states = _current_drain(run)
    if not drain:
        return []
    aborted = {str(a) for e, a in run.events if e == "abort"}
    last = run.outcomes[drain[-1]]
    left = [rid for rid, s in states.items() if s.status in ("waiting", "running") and rid not in aborted]
    if len(drain) >= bound and left:
        return [(last.step, f"{len(left)} requests unfinished after a {len(drain)}-step drain "
                            f"(bound {bound}): {', '.join(left[:5])}")]
    return []


def first_fixpoint(run: RunRecord) -> list[Breach]:
    """The fixpoint rule of ``progress``'s run half: a step whose record and the next one's
    carry equal fingerprints, with no add or abort between them, started from the state it
    led back to; the loops are deterministic functions of their state, so with an
    unaborted request live it repeats for ever. The first such step of each stretch without
    ops is reported. Costs the run's events and outcomes once, and the live ids it names."""
    live: dict[str, None] = {}  # the unaborted, unfinished requests, in the order added
    out: list[Breach] = []
    steps, outcomes = run.steps, run.outcomes
    previous: Optional[int] = None  # the step before, with no op since
    reported = False  # this stretch without ops has been reported
    for event, arg in run.events:
        if event != "step":
            if event == "abort":
                live.pop(str(arg), None)
            else:
                live[str(arg)] = None
            previous, reported = None, False
            continue
        index = int(arg)  # type: ignore[call-overload]
        rec = steps[index]
        if (previous is not None and not reported and rec.fingerprint is not None and live
                and rec.fingerprint == steps[previous].fingerprint and steps[previous].error is None):
            out.append((steps[previous].step, f"the step changed nothing ({len(live)} requests live: "
                                              f"{', '.join(list(live)[:5])}) and will repeat for ever"))
            reported = True
        if index < len(outcomes):
            for rid, state in outcomes[index].requests.items():
                if state.status in ("finished", "aborted"):
                    live.pop(rid, None)
        previous = index
    return out


def ends_in_fixpoint(run: RunRecord) -> bool:
    """Whether the run's last two events are steps with equal fingerprints: ``first_fixpoint``
    judges the step before the last, and further steps without ops would repeat it. O(1)."""
    events, steps = run.events, run.steps
    if len(events) < 2 or events[-2][0] != "step" or events[-1][0] != "step":
        return False
    before, last = steps[-2], steps[-1]
    return last.fingerprint is not None and last.fingerprint == before.fingerprint and before.error is None


def progress_run(run: RunRecord) -> list[Breach]:
    """The run half of ``progress``: the first step of a fixpoint (``first_fixpoint``), and
    a drain past its bound (``progress_bound``) for the livelocks that are not fixpoints."""
    return first_fixpoint(run) + progress_bound(run)


@invariant("progress", STEP, "a step grants a token when some request could take one; a step that leaves the "
           "state unchanged with a request live is a deadlock; a drain finishes within a bound",
           liveness=True, run_predicate=progress_run)
def progress(rec: StepRecord) -> list[Breach]:
    if rec.progress_possible and rec.total_scheduled_tokens == 0:
        return [(rec.step, "a request could take a token but the step granted none")]
    return []


# -- config invariants ----------------------------------------------------------------
@invariant("config-sound", CONFIG, "every accepted config allows progress from an empty system")
def config_sound(probe: ConfigProbe) -> list[Breach]:
    if probe.accepted and probe.first_step_grants <= 0:
        return [(None, "the config is accepted but an empty system cannot schedule a token")]
    return []


@invariant("config-complete", CONFIG, "every rejected config really cannot be served safely")
def config_complete(probe: ConfigProbe) -> list[Breach]:
    if not probe.accepted and probe.first_step_grants > 0 and not probe.safety_violations:
        return [(None, "the config is rejected but serves safely")]
    return []


# -- efficiency -----------------------------------------------------------------------
def work_gap(rec: StepRecord) -> int:
    """Tokens left unused although a queued request wanted them and both the runner
    (B rows, one more request's draft slots included) and the KV pool had room (less the
    lookahead the scheduler reserves with a grant)."""
    if rec.unserved_demand is None:
        return 0
    lim = rec.limits
    rows_room = lim.max_num_batched_tokens - rec.total_runner_rows - lim.draft_slots
    reserved = lim.lookahead if lim.reserved_lookahead is None else lim.reserved_lookahead
    kv_room = (lim.num_kv_blocks - rec.kv_blocks_in_use) * lim.block_size - reserved
    return max(0, min(rows_room, kv_room, rec.unserved_demand))


@invariant("work-conserving", EFFICIENCY,
           "budget is left unused only when no eligible request could use it (a measured gap)")
def work_conserving(rec: StepRecord) -> list[Breach]:
    gap = work_gap(rec)
    if gap > 0 and not rec.preempted:
        return [(rec.step, f"{gap} tokens of budget unused while requests waited")]
    return []


INVARIANTS: dict[str, Invariant] = {inv.id: inv for inv in (
    input_budget_nonnegative, token_cap, input_rows_cap, exact_refund, seq_cap, kv_capacity, model_len, spec_shape,
    placeholder_fresh, encoder_cap, encoder_ready, model_error, no_request_lost, progress, config_sound, config_complete, work_conserving,
)}

JUDGED_KINDS = (LEDGER, STEP, RUN)  # what check_run judges; efficiency is measured, config probed
MODEL_JUDGED = tuple(inv.id for inv in INVARIANTS.values() if inv.kind in JUDGED_KINDS and not inv.engine_only)
STEP_CHECKS: tuple[Invariant, ...] = tuple(inv for inv in INVARIANTS.values() if inv.kind in (LEDGER, STEP))
RUN_CHECKS: tuple[Callable[[RunRecord], list[Violation]], ...] = tuple(
    inv if inv.kind == RUN else inv.over_run for inv in INVARIANTS.values() if inv.kind == RUN or inv.run_predicate
)


def check_step(rec: StepRecord) -> list[Violation]:
    """Every safety and liveness invariant of one step."""
    out: list[Violation] = []
    for check in STEP_CHECKS:
        breaches = check.predicate(rec)
        if breaches:
            out.extend(check._violations(breaches))
    return out


def check_run(run: RunRecord) -> list[Violation]:
    """Every step invariant of every step, then the run invariants."""
    out: list[Violation] = []
    for rec in run.steps:
        out.extend(check_step(rec))
    for check in RUN_CHECKS:
        out.extend(check(run))
    return out
