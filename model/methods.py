"""The method table: draft slots and KV lookahead per speculative method, by engine version.

One source of truth for how many extra runner rows (draft slots, ``d``) a scheduled
request occupies and how many lookahead KV slots (``L``) it reserves. Every entry is
affine in ``k`` (``num_speculative_tokens``): ``(a, b)`` means ``a * k + b``, so the
same table serves ints and z3 terms. Versions differ; add a table, not a branch.

Sources (vLLM 0.32.0): ``SpeculativeConfig.max_num_new_slots_for_drafting`` in
``vllm/config/speculative.py`` and ``VllmConfig.num_lookahead_tokens`` in
``vllm/config/vllm.py``. FastDeploy: a decoding request runs its ``k + 1`` target
rows every step (``decode_rows``), whatever the scheduler charged for it.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

from .intlike import IntLike

Affine = tuple[int, int]  # (a, b) -> a * k + b


@dataclass(frozen=True)
class MethodRow:
    """Per-method facts of one engine version, each affine in k."""

    serial_draft_slots: Affine
    parallel_draft_slots: Affine | None  # None: the method has no parallel variant
    lookahead: Affine
    decode_rows: Affine  # target rows a decoding request really runs per step


def _eval(coef: Affine, k: IntLike) -> IntLike:
    a, b = coef
    return a * k + b


VLLM_0_32: Mapping[str, MethodRow] = {
    # method:      serial d  parallel d   lookahead L   rows of a decode (1 + k drafts)
    "eagle3": MethodRow((0, 0), (1, -1), (1, 0), (1, 1)),
    "mtp": MethodRow((0, 0), (1, -1), (1, 0), (1, 1)),
    "dflash": MethodRow((1, 0), (1, 0), (1, 1), (1, 1)),
    "dspark": MethodRow((1, -1), (1, -1), (1, 0), (1, 1)),
    "ngram": MethodRow((0, 0), (1, -1), (0, 0), (1, 1)),
    "draft_model": MethodRow((0, 1), (1, 0), (1, 0), (1, 1)),
}

# FastDeploy's runner has no separate draft slots in the target batch: a decode
# simply runs 1 + k rows. Its scheduler reserves KV for the drafts of a decode.
FASTDEPLOY: Mapping[str, MethodRow] = {
    m: MethodRow((0, 0), (0, 0), (1, 0), (1, 1)) for m in ("mtp", "ngram")
}

TABLES: Mapping[str, Mapping[str, MethodRow]] = {
    "vllm-0.32": VLLM_0_32,
    "fastdeploy": FASTDEPLOY,
}

DEFAULT_TABLE = "vllm-0.32"
ALL_METHODS: tuple[str, ...] = tuple(sorted({m for t in TABLES.values() for m in t}))


def method_row(table: str, method: str) -> MethodRow:
    """The row of ``method`` in ``table``; KeyError names what is known."""
    rows = TABLES[table]
    if method not in rows:
        raise KeyError(f"method {method!r} is not in the {table} table (known: {', '.join(sorted(rows))})")
    return rows[method]


def draft_slots(table: str, method: str, k: IntLike, parallel: bool) -> IntLike:
    """d: extra runner rows each scheduled request occupies (0 without speculation)."""
    row = method_row(table, method)
    coef = row.parallel_draft_slots if parallel else row.serial_draft_slots
    assert coef is not None, f"{method} has no parallel drafting in {table}"
    return _eval(coef, k)


def lookahead(table: str, method: str, k: IntLike) -> IntLike:
    """L: KV slots reserved past the scheduled tokens of every scheduled request."""
    return _eval(method_row(table, method).lookahead, k)


def decode_rows(table: str, method: str, k: IntLike) -> IntLike:
    """Target rows a decoding request runs per step on this engine."""
    return _eval(method_row(table, method).decode_rows, k)
