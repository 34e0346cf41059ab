"""``check_step`` over numpy columns of a record: the same violations, at the cost of a few numpy calls.

``check_step_columnar(rec)`` gives what ``check_step(rec)`` gives, for every record
(``tests/integration/test_columnar_step.py``). An invariant that walks the grants or the ledger is
first screened over the record's columns; a flagged one is judged by its own predicate. The screens:

- ``input-budget-nonnegative``: the least input budget after a ledger entry;
- ``exact-refund``: no refund, and each entry's budgets before are the last one's after;
- ``kv-capacity``: the pool's size, each grant's KV need against the blocks it holds, and
  no block held twice (one set of every block held);
- ``model-len``: computed + granted + sampled against max_model_len;
- ``spec-shape``: drafts against k, the prefill chunks' and padded grants' drafts.

The others are judged as ``check_step`` judges them; ``check_run_columnar`` is ``check_run`` so.
"""
from __future__ import annotations

from functools import cached_property
from itertools import chain
from typing import Any, Callable

import numpy as np

from .invariants import RUN_CHECKS, STEP_CHECKS, Violation, check_step
from .records import RunRecord, StepRecord

_I64 = np.int64
MIN_GRANTS = 32  # below this many grants in a record, check_step itself costs less than the screens


class _Columns:
    """The columns of one record the screens share, each read (in C) when first asked for."""

    def __init__(self, rec: StepRecord) -> None:
        self.rec = rec
        self.n = len(rec.num_scheduled_tokens)

    def of(self, table: Any) -> Any:
        """``table``'s values in the order of the grants (KeyError: a grant missing from it)."""
        return np.fromiter(map(table.__getitem__, self.rec.num_scheduled_tokens), dtype=_I64, count=self.n)

    @cached_property
    def grants(self) -> Any:
        return np.fromiter(self.rec.num_scheduled_tokens.values(), dtype=_I64, count=self.n)

    @cached_property
    def computed(self) -> Any:
        return self.of(self.rec.computed_before)

    @cached_property
    def ledger(self) -> tuple[tuple[Any, ...], ...]:
        """kind, request, tokens, token before, token after, input before, input after: a tuple each."""
        return tuple(zip(*self.rec.ledger)) if self.rec.ledger else ()


def _input_may_go_negative(cols: _Columns) -> bool:
    rec = cols.rec
    if rec.initial_input_budget is not None and rec.initial_input_budget < 0:
        return True
    if not cols.ledger:
        return False
    after = cols.ledger[6]
    if None in after:
        return any(a is not None and a < 0 for a in after)
    return bool(min(after) < 0)


def _ledger_may_break(cols: _Columns) -> bool:
    if not cols.ledger:
        return False
    rec = cols.rec
    kind, _, _, token_before, token_after, input_before, input_after = cols.ledger
    if kind.count("grant") != len(kind):
        return True  # a refund: judged in full
    if token_before[0] != rec.initial_token_budget or input_before[0] != rec.initial_input_budget:
        return True
    return token_before[1:] != token_after[:-1] or input_before[1:] != input_after[:-1]


def _kv_may_break(cols: _Columns) -> bool:
    rec = cols.rec
    lim = rec.limits
    if rec.kv_blocks_in_use > lim.num_kv_blocks:
        return True
    grants, tables, rows = rec.num_scheduled_tokens, rec.block_tables, rec.runner_rows
    if cols.n:
        if rows.keys() != grants.keys() or not tables.keys() >= grants.keys():
            return True  # a grant without rows or without a table: judged in full
        need = np.minimum(cols.computed + cols.of(rows) + (lim.lookahead - lim.draft_slots), lim.max_model_len)
        held = np.fromiter(map(len, map(tables.__getitem__, grants)), dtype=_I64, count=cols.n)
        if (held * lim.block_size < need).any():
            return True
    values = tables.values()
    return len(set(chain.from_iterable(values))) != sum(map(len, values))


def _model_len_may_break(cols: _Columns) -> bool:
    if not cols.n:
        return False
    lim = cols.rec.limits
    return bool((cols.computed + cols.grants > lim.max_model_len + lim.context_headroom - lim.sampled_tokens).any())


def _shape_may_break(cols: _Columns) -> bool:
    rec = cols.rec
    drafts, k = rec.scheduled_draft_tokens, rec.limits.num_speculative_tokens
    if drafts and max(drafts.values()) > k:
        return True
    if any(drafts.get(rid, 0) != 0 for rid in rec.prefill):
        return True
    return bool(rec.padded)  # a padded grant is judged in full (a few per step at most)


SCREENS: dict[str, Callable[[_Columns], bool]] = {
    "input-budget-nonnegative": _input_may_go_negative,
    "exact-refund": _ledger_may_break,
    "kv-capacity": _kv_may_break,
    "model-len": _model_len_may_break,
    "spec-shape": _shape_may_break,
}
assert SCREENS.keys() <= {check.id for check in STEP_CHECKS}


def check_step_columnar(rec: StepRecord) -> list[Violation]:
    """``check_step(rec)``: each invariant with a screen judged only when its screen flags the record."""
    if len(rec.num_scheduled_tokens) < MIN_GRANTS:
        return check_step(rec)
    out: list[Violation] = []
    cols = _Columns(rec)
    for check in STEP_CHECKS:
        screen = SCREENS.get(check.id)
        if screen is None or screen(cols):
            out.extend(check(rec))
    return out


def check_run_columnar(run: RunRecord) -> list[Violation]:
    """``check_run(run)``, each step judged by ``check_step_columnar``."""
    out: list[Violation] = []
    for rec in run.steps:
        out.extend(check_step_columnar(rec))
    for check in RUN_CHECKS:
        out.extend(check(run))
    return out
