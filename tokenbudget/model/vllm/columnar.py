"""The columnar step of vLLM's loop: a large running pass resolved over numpy columns."""
from __future__ import annotations

from dataclasses import dataclass
from itertools import chain, compress, repeat
from typing import Any, Callable, Optional

import numpy as np

from ...spec import grant_rules
from ...spec.records import LedgerEntry, RequestState, StepOutcome, StepRecord, pass_record
from .. import decisions
from ..one_pass_loop import HOOKS, VARIANT_FLAGS
from ..policy import Budgets
from ..request import Request, Status
from ..step_pass import StepPass

MIN_RUNNING = 48  # the least running requests a step goes columnar with: below, the scalar step costs less
_I64 = np.int64
# The shared functions the columnar step reproduces; a step where one was replaced (a planted bug) runs scalar.
_DECISIONS = {name: getattr(decisions, name) for name in (
    "running_grant", "scheduled_drafts", "capped_by_threshold", "accepted_drafts", "computed_after_output",
    "running_demand", "unserved_total")}
_KV_SLOTS = grant_rules.kv_slots_needed


@dataclass(frozen=True)
class ColumnarRules:
    """A built-in policy's budget rules over columns, as its IntLike methods state them on
    ints: the exit rule, the most one grant may take, and the input charge of a grant (None:
    the policy keeps no input budget). ``d`` is the policy's ``draft_slots``."""

    may_schedule: Callable[[Any, Any, int], Any]  # (token, input, d) -> bool column
    limit: Callable[[Any, Any, int], Any]  # (token, input, d) -> the most a grant may take
    input_charge: Optional[Callable[[Any, int], Any]]  # (grant, d) -> input charge


RULES: dict[str, ColumnarRules] = {
    # vllm_policies.VllmAdaptive: exit token > 0 and input > d; grant min(demand, token, input - d); charge grant + d
    "vllm-adaptive": ColumnarRules(lambda t, i, d: (t > 0) & (i > d), lambda t, i, d: np.minimum(t, i - d),
                                   lambda g, d: g + d),
    # vllm_policies.VllmStatic: exit token > 0; grant min(demand, token); the token budget only
    "vllm-static": ColumnarRules(lambda t, i, d: t > 0, lambda t, i, d: t, None),
}
_POLICY_METHODS = ("initial_budgets", "may_schedule", "grant", "charge", "spend", "runner_rows")


_MODEL = __package__.rpartition(".")[0] + "."  # the model's package: the policy base class lives above vllm/


def _own(fn: Any) -> bool:
    """Whether ``fn`` is a function the model itself defines (not one a test or a user put in its place)."""
    return getattr(fn, "__module__", "").startswith(_MODEL)


def _model_method(cls: type, name: str) -> bool:
    """Whether ``cls.name`` is the model's own method of the class it is found in (not a
    function from elsewhere, nor another class's method, set in its place)."""
    definer = next(c for c in cls.__mro__ if name in vars(c))
    fn = vars(definer)[name]
    return _own(fn) and getattr(fn, "__qualname__", "") == f"{definer.__name__}.{name}"


_METHODS_SEEN: dict[type, tuple[tuple[Any, ...], bool]] = {}  # a class -> its methods when last judged, the verdict


def _builtin_methods(cls: type) -> bool:
    """``_model_method`` of every method in ``_POLICY_METHODS``, judged again only when one
    of them is another function than when ``cls`` was last judged."""
    methods = tuple(getattr(cls, name) for name in _POLICY_METHODS)
    seen = _METHODS_SEEN.get(cls)
    if seen is None or seen[0] != methods:
        seen = _METHODS_SEEN[cls] = (methods, all(_model_method(cls, name) for name in _POLICY_METHODS))
    return seen[1]


def applies(loop: Any) -> bool:
    """Whether a step of ``loop`` (a ``VllmLoop``, no variant: its caller checks the class)
    may go columnar: a built-in policy of ``RULES`` whose budget methods are the model's
    own, the loop's hooks (the shared ones) and flags as the model defines them, and the
    shared decision functions in place."""
    policy = loop.policy
    cls = type(policy)
    if not cls.__module__.startswith(__package__ + ".") or getattr(cls, "name", None) not in RULES or vars(policy):
        return False
    if not _builtin_methods(cls):
        return False
    if not all(getattr(loop, flag) for flag in VARIANT_FLAGS):
        return False
    if not all(_own(fn) and fn.__qualname__ == f"OnePassLoop.{hook}"
               for hook in HOOKS for fn in [getattr(type(loop), hook).__func__]):
        return False
    return all(getattr(decisions, name) is fn for name, fn in _DECISIONS.items()) \
        and grant_rules.kv_slots_needed is _KV_SLOTS


@dataclass
class Memo:
    """What a columnar step keeps for the output of its record (``last``) and the block tables
    the last columnar step or output left, with the ``state_changes`` they hold at. A cache:
    each part is used only while its record and count still stand."""

    last: Optional["_Last"] = None
    tables: Optional[tuple[dict[str, tuple[int, ...]], int]] = None

    def forget(self) -> None:
        self.last = self.tables = None


@dataclass
class _Granted:
    """The running requests a columnar pass granted, in queue order, and their columns."""

    reqs: list[Request]
    ids: list[str]
    grant: Any
    computed_after: Any
    num_tokens: Any
    drafts: Any
    prompt: Any
    output: Any
    max_tokens: Any


@dataclass
class _Last:
    """What ``update`` needs of the last columnar record: all its grants, in record order."""

    record: StepRecord
    state_changes: int
    reqs: list[Request]
    ids: list[str]
    computed_before: Any
    grant: Any
    num_tokens: Any
    drafts: Any
    padded: Any
    is_prefill_chunk: Any
    prompt: Any
    output: Any
    max_tokens: Any


def _column(values: Any) -> Any:
    return np.array(values, dtype=_I64)


def schedule(loop: Any) -> Optional[StepRecord]:
    """The step's record, or None (nothing changed) when the running pass would preempt."""
    policy, params, cfg, pool = loop.policy, loop.params, loop.cfg, loop.pool
    rules = RULES[policy.name]
    running = loop.running
    cols = np.fromiter(chain.from_iterable([(r.num_computed_tokens, r.num_prompt_tokens, r.num_output_tokens,
                                             r.num_draft_tokens, r.is_prefill_chunk, len(r.block_ids),
                                             r.num_cached_blocks, r.max_tokens) for r in running]),
                       dtype=_I64, count=8 * len(running)).reshape(-1, 8)
    computed, prompt, output, drafts, prefill_chunk, held, cached, max_tokens = cols.T
    num_tokens = prompt + output
    initial = policy.initial_budgets(params, len(running) - int(prefill_chunk.sum()))
    step = StepPass(policy, params, initial, loop.need)
    num_eligible = len(running) + len(loop.waiting)
    threshold = cfg.long_prefill_token_threshold if num_eligible > 1 and loop.applies_long_prefill_threshold else 0
    d, lookahead, max_model_len, block_size = params.draft_slots, loop.lookahead, cfg.max_model_len, cfg.block_size

    demand = num_tokens + drafts - computed
    if threshold > 0:
        demand = np.where(demand > threshold, threshold, demand)
    wanted = np.minimum(demand, max_model_len - computed - 1)
    grant = _resolve(rules, wanted, initial, d)
    on = grant > 0
    every = bool(on.all())
    g = grant if every else grant[on]
    c_before, n_on = (computed, num_tokens) if every else (computed[on], num_tokens[on])
    slots = np.minimum(c_before + g + lookahead, max_model_len)
    new_blocks = np.maximum(-(-slots // block_size) - held[on], 0)
    if int(new_blocks.sum()) > pool.num_free:
        return None  # some allocation would fail: the scalar step preempts

    progress_possible = loop._progress_possible(step)
    fingerprint = loop.fingerprint()
    tables_before = loop.columnar_memo.tables
    known = tables_before is not None and tables_before[1] == loop.state_changes
    loop.aborted_in_step = []
    if every:
        reqs = list(running)
        drafts_on, prefill_on, prompt_on, output_on, max_on, cached_on = (drafts, prefill_chunk, prompt, output,
                                                                         max_tokens, cached)
    else:
        reqs = [running[i] for i in np.flatnonzero(on).tolist()]
        drafts_on, prefill_on, prompt_on, output_on, max_on, cached_on = (drafts[on], prefill_chunk[on], prompt[on],
                                                                         output[on], max_tokens[on], cached[on])
    ids = [r.request_id for r in reqs]
    c_list, g_list, slot_list = c_before.tolist(), g.tolist(), slots.tolist()
    for j in np.flatnonzero(new_blocks).tolist():  # in queue order: the pool hands out blocks in call order
        allocated = pool.allocate(reqs[j], slot_list[j], [])
        assert allocated, "the free blocks were counted before"
    after = c_before + g
    if pool.enable_prefix_caching:
        upto = np.minimum(after, n_on)
        for j in np.flatnonzero(upto // block_size > cached_on).tolist():
            pool.cache_full_blocks(reqs[j], int(upto[j]))

    sched_drafts = np.maximum(0, np.minimum(drafts_on, after - n_on))
    is_decode = prefill_on == 0
    _ledger(step, rules, ids, g, initial, d)
    step.grants = dict(zip(ids, g_list))
    step.drafts = dict(zip(ids, sched_drafts.tolist()))
    step.rows = dict(zip(ids, (g + int(loop.need.draft_slots)).tolist()))
    step.computed_before = dict(zip(ids, c_list))
    step.num_tokens = dict(zip(ids, n_on.tolist()))
    step.charged_as_decode = dict(zip(ids, is_decode.tolist()))
    step.prefill = set(compress(ids, (~is_decode & (c_before < n_on - 1)).tolist())) if not is_decode.all() else set()
    step.scheduled_running = reqs
    step.prefill_scheduled = not is_decode.all()
    granted = _Granted(reqs, ids, g, after, n_on, sched_drafts, prompt_on, output_on, max_on)
    admitted_from = len(running)
    loop._schedule_waiting(step, threshold)
    admitted = running[admitted_from:]

    still_prefill = after < n_on
    for req, c, pf in zip(reqs, after.tolist(), still_prefill.tolist()):
        req.num_computed_tokens = c
        req.is_prefill_chunk = pf
        req.num_draft_tokens = 0
    for req in admitted:
        req.num_computed_tokens += step.grants[req.request_id]
        req.is_prefill_chunk = req.num_computed_tokens < req.num_tokens
        req.num_draft_tokens = 0
    if step.grants or loop.aborted_in_step:
        loop.state_changes += 1

    computed_now = computed.copy()
    computed_now[on] = after
    drafts_now = np.where(on, 0, drafts)
    wanted_running = int(np.maximum(0, num_tokens + drafts_now - computed_now).sum())
    for r in admitted:
        wanted_running += decisions.running_demand(r.num_tokens, r.num_draft_tokens, r.num_computed_tokens)
    waiting = loop.waiting_ids()
    unserved = decisions.unserved_total(cfg.max_num_seqs, len(running), wanted_running, loop.waiting_snapshot.demand)
    record = pass_record(
        loop.num_steps, loop.limits, step.grants, step.drafts, step.rows, step.computed_before, step.num_tokens,
        step.prefill, (), ids if every and not admitted else [r.request_id for r in running], waiting, pool.num_in_use,
        _tables(tables_before[0] if known else None, running, reqs, new_blocks, admitted), loop._shared_block_keys(),
        padded=step.padded, unserved_demand=unserved, initial_token_budget=initial.token,
        initial_input_budget=initial.input, ledger=step.ledger, progress_possible=progress_possible,
        fingerprint=fingerprint,
    )
    loop.num_steps += 1
    loop.columnar_memo.last = _last_of(loop, record, step, granted, admitted)
    loop.columnar_memo.tables = (record.block_tables, loop.state_changes)
    return record


def _tables(before: Optional[dict[str, tuple[int, ...]]], running: list[Request], granted: list[Request],
            new_blocks: Any, admitted: list[Request]) -> dict[str, tuple[int, ...]]:
    """The block tables of the running queue after the pass: those of the last record the
    loop left them at (``before``: None when unknown), less nothing (a columnar pass preempts
    none), with the running requests that took new blocks and the admitted ones changed."""
    if before is None:
        return {r.request_id: r.block_table() for r in running}
    assert len(before) == len(running) - len(admitted), "the tables left are the running queue's"
    tables = dict(before)
    for j in np.flatnonzero(new_blocks).tolist():
        req = granted[j]
        tables[req.request_id] = req.block_table()
    for req in admitted:
        tables[req.request_id] = req.block_table()
    return tables


def _resolve(rules: ColumnarRules, wanted: Any, initial: Budgets, d: int) -> Any:
    """Each running request's grant (<= 0: skipped, or not reached) under the budget recurrence:
    a prefix of full grants from cumulative sums, the request the budgets cut, then again."""
    grant = np.maximum(wanted, 0)
    token, inp = int(initial.token), initial.input
    start, n = 0, len(wanted)
    while start < n:
        full = grant[start:]
        tok = token - (np.cumsum(full) - full)  # the token budget before each, the full grants before it taken
        inp_left = None
        if inp is not None:
            charge = np.where(full > 0, rules.input_charge(full, d), 0)
            inp_left = inp - (np.cumsum(charge) - charge)
        ok = rules.may_schedule(tok, inp_left, d)
        limit = rules.limit(tok, inp_left, d)
        fits = ok & (full <= limit)  # a skipped request (0) fits wherever the exit rule lets the pass go on
        if fits.all():
            break
        stop = int(np.argmin(fits))
        if not ok[stop]:
            grant[start + stop:] = 0  # the pass ends before it
            break
        cut = int(limit[stop])  # the exit rule let it in, the budgets cut its grant
        grant[start + stop] = cut
        token = int(tok[stop]) - cut
        if inp_left is not None:
            inp = int(inp_left[stop]) - int(rules.input_charge(cut, d))
        start += stop + 1
    return grant


def _ledger(step: StepPass, rules: ColumnarRules, ids: list[str], g: Any, initial: Budgets, d: int) -> None:
    """The grants' ledger entries, budgets before and after each, and the pass's budgets after them."""
    token_after = int(initial.token) - np.cumsum(g)
    token_before = token_after + g
    if initial.input is None:
        inputs: Any = repeat(None)
        input_after = None
        columns = zip(repeat("grant"), ids, g.tolist(), token_before.tolist(), token_after.tolist(), inputs, inputs)
    else:
        charge = rules.input_charge(g, d)
        in_after = int(initial.input) - np.cumsum(charge)
        in_before = in_after + charge
        input_after = int(in_after[-1]) if len(g) else int(initial.input)
        columns = zip(repeat("grant"), ids, g.tolist(), token_before.tolist(), token_after.tolist(),
                      in_before.tolist(), in_after.tolist())
    step.ledger = list(map(tuple.__new__, repeat(LedgerEntry), columns))  # NamedTuples, built in C
    step.budgets = Budgets(int(token_after[-1]) if len(g) else int(initial.token), input_after)


def _last_of(loop: Any, record: StepRecord, step: StepPass, granted: _Granted, admitted: list[Request]) -> _Last:
    """Every grant of ``record`` as columns, the admissions' appended to the running pass's."""
    g = granted.grant
    head = (granted.computed_after - g, g, granted.num_tokens, granted.drafts, np.zeros(len(g), dtype=_I64),
            (granted.computed_after < granted.num_tokens).astype(_I64), granted.prompt, granted.output,
            granted.max_tokens)
    reqs, ids = granted.reqs, granted.ids
    if admitted:
        cb, grants, tokens, drafts, padded = (step.computed_before, step.grants, step.num_tokens, step.drafts,
                                              step.padded)
        tail = _column([(cb[r.request_id], grants[r.request_id], tokens[r.request_id], drafts[r.request_id],
                         r.request_id in padded, r.is_prefill_chunk, r.num_prompt_tokens, r.num_output_tokens,
                         r.max_tokens) for r in admitted]).T
        head = tuple(np.concatenate([h, t]) for h, t in zip(head, tail))
        reqs, ids = reqs + admitted, ids + [r.request_id for r in admitted]
    c_before, grant, num_tokens, drafts, padded, prefill_chunk, prompt, output, max_tokens = head
    return _Last(record, loop.state_changes, reqs, ids, c_before, grant, num_tokens, drafts, padded.astype(bool),
                 prefill_chunk.astype(bool), prompt, output, max_tokens)


def update(loop: Any, record: StepRecord, accepted: dict[str, int]) -> Optional[StepOutcome]:
    """The output of the last columnar record, or None when ``record`` is not that one or the
    state changed since it (the scalar update then applies it)."""
    memo = loop.columnar_memo
    last, memo.last = memo.last, None
    if last is None or last.record is not record or last.state_changes != loop.state_changes:
        return None
    k, max_model_len, pool = loop.k, loop.cfg.max_model_len, loop.pool
    decode = ~last.is_prefill_chunk
    reqs = last.reqs
    acc = _column([accepted.get(rid, 0) for rid in last.ids]) if accepted else np.zeros(len(reqs), dtype=_I64)
    taken = np.where(last.padded, 0, np.maximum(0, np.minimum(acc, last.drafts)))
    computed = last.computed_before + last.grant
    computed = np.where(decode, computed - (last.computed_before + last.grant - last.num_tokens - taken), computed)
    room = np.minimum(last.max_tokens - last.output, max_model_len - last.num_tokens)
    kept = np.where(decode, np.minimum(1 + taken, room), 0)
    output = last.output + kept
    if loop._stop_cuts_computed():
        computed = computed - np.where(decode, 1 + taken - kept, 0)
    tokens = last.prompt + output
    finished = decode & ((output >= last.max_tokens) | (tokens >= max_model_len))
    going_on = decode & ~finished
    assert (computed[going_on] == tokens[going_on] - 1).all(), "a decode's computed tokens end one short"
    c_list, o_list = computed.tolist(), output.tolist()
    for j in np.flatnonzero(decode).tolist():
        req = reqs[j]
        req.num_computed_tokens = c_list[j]
        req.num_output_tokens = o_list[j]
    for j in np.flatnonzero(going_on).tolist():
        reqs[j].num_draft_tokens = k
    caches = loop._caches_blocks_at_output() and pool.enable_prefix_caching
    visit = finished | (decode & (computed // pool.block_size > _column([r.num_cached_blocks for r in reqs]))) \
        if caches else finished
    gone = []
    for j in np.flatnonzero(visit).tolist():  # in record order: the pool's free queue follows it
        req = reqs[j]
        if caches:
            pool.cache_full_blocks(req, c_list[j])
        if finished[j]:
            pool.free(req)
            req.status = Status.FINISHED
            gone.append(req)
    tables = record.block_tables
    if gone:
        dropped = set(map(id, gone))
        loop.running[:] = [r for r in loop.running if id(r) not in dropped]
        tables = dict(tables)
        for req in gone:
            del tables[req.request_id]
    memo.tables = (tables, loop.state_changes)
    status = ["finished" if f else "running" for f in finished.tolist()]
    states = map(tuple.__new__, repeat(RequestState),
                 zip(status, c_list, o_list, last.max_tokens.tolist(), last.prompt.tolist()))
    return StepOutcome(step=record.step, requests=dict(zip(last.ids, states)), preempted=frozenset())
