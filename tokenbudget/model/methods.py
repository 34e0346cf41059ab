"""The method table: draft slots, KV lookahead and drafting per speculative method, by engine version."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

from ..spec.intlike import IntLike

Affine = tuple[int, int]  # (a, b) -> a * k + b

# The drafters of the torch runner: n-gram matching on the request's tokens (no model), or
# the early-exit drafter (the target's first layers), which fills the draft slots.
NGRAM_DRAFTER, MODEL_DRAFTER = "ngram", "model"


@dataclass(frozen=True)
class MethodRow:
    """Per-method facts of one engine version, the counts affine in k."""

    serial_draft_slots: Affine
    parallel_draft_slots: Affine | None  # None: the method has no parallel variant
    lookahead: Affine
    decode_rows: Affine  # target rows a decoding request really runs per step
    drafter: str  # NGRAM_DRAFTER | MODEL_DRAFTER
    drops_last_hit_block: bool = False  # a prefix-cache hit gives back its last block
    parallel_only: bool = False  # the engine turns parallel drafting on whatever the config says
    hash_lookahead: int = 0  # tokens past a block that its prefix-cache key covers (vLLM 0.33)
    one_model: bool = False  # the target's forward drafts; no drafter object exists when the scheduler runs
    writes: Affine | None = None  # KV positions a model drafter writes past the target rows; None: the lookahead

    def __post_init__(self) -> None:
        assert self.drafter in (NGRAM_DRAFTER, MODEL_DRAFTER), self.drafter
        assert not self.parallel_only or self.serial_draft_slots == self.parallel_draft_slots, self


def _eval(coef: Affine, k: IntLike) -> IntLike:
    a, b = coef
    return a * k + b


# "drop hit block" is ``SpeculativeConfig.use_eagle_block_drop()``: for the methods that
# draft from the target's hidden states, the KV cache manager drops the last block of
# every prefix-cache hit (``FullAttentionManager.find_longest_cache_hit``,
# vllm/v1/core/single_type_kv_cache_manager.py), so that block is recomputed. "parallel
# only": ``SpeculativeConfig.__post_init__`` sets ``parallel_drafting`` for dflash and
# dspark (vllm/config/speculative.py:1469).
# "writes": the EAGLE-family proposer (EAGLE3, MTP) runs its first pass on the target's own
# positions, its input ids shifted by one (``set_inputs_first_pass``), then k - 1 serial passes
# one position further each (``for token_index in range(self.num_speculative_tokens - 1)``,
# vllm/v1/spec_decode/llm_base_proposer.py:689 (0.32.0), :688 (0.33.0)): k - 1 positions past
# the target rows, one less than the k that ``num_lookahead_tokens`` reserves. A draft model
# (unshifted: one extra slot for the next token, then the same k - 1) writes k, DFlash's bonus
# query and k draft queries k + 1 (vllm/v1/spec_decode/dflash.py:126): both their reservation.
_N, _M = NGRAM_DRAFTER, MODEL_DRAFTER
VLLM_0_32: Mapping[str, MethodRow] = {
    # method:      serial d  parallel d   lookahead L   rows of a decode   drafter  drop hit block  parallel only
    "eagle3": MethodRow((0, 0), (1, -1), (1, 0), (1, 1), _M, True, writes=(1, -1)),
    "mtp": MethodRow((0, 0), (1, -1), (1, 0), (1, 1), _M, True, writes=(1, -1)),
    "dflash": MethodRow((1, 0), (1, 0), (1, 1), (1, 1), _M, True, True),
    "dspark": MethodRow((1, -1), (1, -1), (1, 0), (1, 1), _M, True, True),
    "ngram": MethodRow((0, 0), (1, -1), (0, 0), (1, 1), _N, False),
    "draft_model": MethodRow((0, 1), (1, 0), (1, 0), (1, 1), _M, False),
}

# vLLM 0.33.0: DFlash and DSpark draft in a separate query pass and add no draft slots
# (``max_num_new_slots_for_drafting``, vllm/config/speculative.py:2082 (vLLM 0.33.0)). No
# method drops the last hit block: DFlash and DSpark never need it (``needs_eagle_block_drop``,
# vllm/config/speculative.py:2122 (vLLM 0.33.0)); for EAGLE3 and MTP the block keys cover the
# token after the block instead (``num_hash_lookahead_tokens``, vllm/config/vllm.py:678
# (vLLM 0.33.0)), and the scheduler turns the drop off (vllm/v1/core/sched/scheduler.py:342-345
# (vLLM 0.33.0)). "hash": tokens past a block that its key covers.
VLLM_0_33: Mapping[str, MethodRow] = {
    # method:      serial d  parallel d   lookahead L   rows of a decode   drafter  drop hit block  parallel only  hash
    "eagle3": MethodRow((0, 0), (1, -1), (1, 0), (1, 1), _M, False, False, 1, writes=(1, -1)),
    "mtp": MethodRow((0, 0), (1, -1), (1, 0), (1, 1), _M, False, False, 1, writes=(1, -1)),
    "dflash": MethodRow((0, 0), (0, 0), (1, 1), (1, 1), _M, False, True),
    "dspark": MethodRow((0, 0), (0, 0), (1, 0), (1, 1), _M, False, True),
    "ngram": MethodRow((0, 0), (1, -1), (0, 0), (1, 1), _N, False),
    "draft_model": MethodRow((0, 1), (1, 0), (1, 0), (1, 1), _M, False),
}

# FastDeploy's runner has no separate draft slots in the target batch: a decode
# simply runs 1 + k rows. Its scheduler reserves KV for the drafts of a decode. Its MTP
# proposer runs ``num_model_steps`` substeps (fastdeploy/spec_decode/mtp.py:892 at 2a606e361),
# the first on the target's positions, each later one a position further: num_model_steps - 1
# positions past the target rows, at most k - 1 (``num_speculative_tokens >= num_model_steps``,
# fastdeploy/config.py:932-936; the default is 1 step, :764), so the table takes k - 1.
FASTDEPLOY: Mapping[str, MethodRow] = {
    "mtp": MethodRow((0, 0), (0, 0), (1, 0), (1, 1), _M, writes=(1, -1)),
    "ngram": MethodRow((0, 0), (0, 0), (1, 0), (1, 1), _N),
}

# TensorRT-LLM's PyTorch backend: a generation request runs 1 + D rows (D = k drafts), and
# ``prepare_resources`` gives it KV for those 1 + D tokens; a model drafter also writes KV
# past the scheduled tokens (``num_extra_kv_tokens`` and the drafts a context's last chunk
# proposes), which the lookahead L = k stands for; n-gram matching writes none. One-model
# speculation (MTP, Eagle3 one-model) drafts inside the target's forward: ``get_spec_drafter``
# returns None, so no placeholder drafts are attached before the scheduler runs
# (tensorrt_llm/_torch/pyexecutor/py_executor.py ``_prepare_and_schedule_batch``, PR #16101).
TRTLLM: Mapping[str, MethodRow] = {
    "mtp": MethodRow((0, 0), (0, 0), (1, 0), (1, 1), _M, one_model=True),
    "eagle3": MethodRow((0, 0), (0, 0), (1, 0), (1, 1), _M, one_model=True),
    "draft_model": MethodRow((0, 0), (0, 0), (1, 0), (1, 1), _M),
    "ngram": MethodRow((0, 0), (0, 0), (0, 0), (1, 1), _N),
}

# SGLang 0.5.23: a decode runs num_draft_tokens = 1 + k verify rows (topk 1 forces
# num_draft_tokens = steps + 1: speculative/base_spec_worker.py:125) and its grant counts
# them, so no draft slots or lookahead sit outside it; the decode's KV reservation is the
# policy's (``sglang_policies``). EAGLE and EAGLE3 share the eagle3 row, and NEXTN (MTP)
# resolves to EAGLE (arg_groups/speculative_hook.py:1211, "NEXTN -> EAGLE"); NGRAM defaults to
# 12 draft tokens and steps = num_draft_tokens // topk (arg_groups/speculative_hook.py:1285-1330).
SGLANG: Mapping[str, MethodRow] = {
    "eagle3": MethodRow((0, 0), None, (0, 0), (1, 1), _M),
    "mtp": MethodRow((0, 0), None, (0, 0), (1, 1), _M),
    "ngram": MethodRow((0, 0), None, (0, 0), (1, 1), _N),
}

TABLES: Mapping[str, Mapping[str, MethodRow]] = {
    "vllm-0.32": VLLM_0_32,
    "vllm-0.33": VLLM_0_33,
    "fastdeploy": FASTDEPLOY,
    "trtllm": TRTLLM,
    "sglang": SGLANG,
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


def drafter_writes(table: str, method: str, k: IntLike) -> IntLike:
    """KV positions past a request's target rows that its model drafter writes (the physical
    L; the reservation where the table records no count of its own)."""
    row = method_row(table, method)
    return _eval(row.lookahead if row.writes is None else row.writes, k)


def decode_rows(table: str, method: str, k: IntLike) -> IntLike:
    """Target rows a decoding request runs per step on this engine."""
    return _eval(method_row(table, method).decode_rows, k)


def drafter(table: str, method: str | None) -> str | None:
    """Which drafter proposes the drafts of ``method`` (None without speculation)."""
    return None if method is None else method_row(table, method).drafter


def first_pass_drafts(d: int, k: int) -> int:
    """Drafts the model drafter proposes in its first pass: one from the new last token and
    one per draft slot (a mask row each, parallel drafting), at most k. Each further draft
    takes one serial pass."""
    return min(1 + d, k)


def drops_last_hit_block(table: str, method: str | None) -> bool:
    """Whether a prefix-cache hit under ``method`` gives back its last block (False without speculation)."""
    return method is not None and method_row(table, method).drops_last_hit_block


def hash_lookahead(table: str, method: str | None) -> int:
    """Tokens past a block that its prefix-cache key covers (0 without speculation)."""
    return 0 if method is None else method_row(table, method).hash_lookahead


def one_model(table: str, method: str | None) -> bool:
    """Whether ``method`` drafts inside the target's forward, with no drafter object at
    scheduling time (False without speculation)."""
    return method is not None and method_row(table, method).one_model
