"""The vLLM version table: what differs between the modelled vLLM versions' budget paths.

One row per modelled version; the vLLM policies, ``VllmLoop`` and the harness read it, so a
policy is one policy across versions. A row holds only what changed; the rest is common.

vLLM 0.33.0 against 0.32.0 (vllm/v1/core/sched/scheduler.py and vllm/config/ of each):

- method table ``vllm-0.33``: DFlash and DSpark add no draft slots, no method drops the last
  prefix-cache hit block, EAGLE3 and MTP keys cover the next token (``tokenbudget/model/methods.py``);
- validation asks ``B > L`` (``num_lookahead_tokens``), no longer ``B > d``
  (``VllmConfig._set_max_num_scheduled_tokens``, vllm/config/vllm.py:2371 (vLLM 0.33.0));
- DFlash and DSpark cap the sequences admitted into RUNNING to ``B // L``
  (``max_num_active_seqs``, vllm/config/vllm.py:2380-2397 (vLLM 0.33.0); read at
  vllm/v1/core/sched/scheduler.py:1073 (vLLM 0.33.0));
- under priority scheduling a request that preempts itself no longer ends the running pass:
  the pass goes on with the next request (vllm/v1/core/sched/scheduler.py:983-992 (vLLM 0.33.0));
- with speculative decoding, a decode's output publishes the prefix-cache blocks its new
  tokens complete, so they are cached even if the request is preempted or finishes before
  the next pass visits it (vllm/v1/core/sched/scheduler.py:2407-2415 (vLLM 0.33.0));
- a request that stops on an output it cannot keep whole (``max_tokens`` or ``max_model_len``
  reached before its last accepted draft) drops the cut tokens from its computed count too,
  so the blocks cached at that output end one token before its last token
  (``_update_request_with_output``, vllm/v1/core/sched/scheduler.py:2758-2763 (vLLM 0.33.0);
  0.32 cut only the tokens, vllm/v1/core/sched/scheduler.py:2506-2509 (vLLM 0.32.0)).

vLLM 0.34.0 against 0.33.0 (SPEC.md §12):

- method table ``vllm-0.34``: parallel drafting only for DFlash and DSpark (``parallel_drafting``
  is deprecated and refused for other methods, vllm/config/speculative.py:1688-1693 (vLLM 0.34.0));
  the counts are 0.33's (``SpeculatorConfig`` per method, vllm/v1/worker/gpu/spec_decode/);
- ``long_prefill_token_threshold`` applies only with chunked prefill
  (vllm/v1/core/sched/scheduler.py:775-779 (vLLM 0.34.0)).

Unchanged for what we model, read and checked by conformance: the waiting loop's exits, now
``loads_only`` when ``token_budget <= 0`` or the seats are full and ``not loads_only and
input_budget <= draft_slots`` (scheduler.py:1091-1112 (vLLM 0.34.0)), exit exactly where 0.33's
did without a KV connector (``async_kv_waiting`` and ``max_num_inflight_kv_loads`` need one,
scheduler.py:2781-2786); ``can_skip_drafts`` for every runner (scheduler.py:321) changes no
grant; ``use_eagle`` is ``uses_target_hidden_states`` (scheduler.py:330), true for the same
methods; ``trim_spec_tokens`` replaces ``validate_tokens`` (scheduler.py:3012) without a
grammar; the block pool's and KV cache manager's changes (prefix-cache hit limits,
``get_num_cached_tokens`` for cache-aware admission, off by default:
vllm/config/scheduler.py:223) change no hit of a request without prompt logprobs.

Not modelled because no modelled config reaches it: a waiting request left 0 tokens by
the multi-module MTP prefill lookahead is requeued instead of ending the waiting pass
(vllm/v1/core/sched/scheduler.py:1394-1398 (vLLM 0.33.0)); the local prefill interval
(``prefill_schedule_interval``, default 1: off; vllm/v1/core/sched/scheduler.py:771-792
(vLLM 0.33.0)); ``drafts_needed`` / ``skip_drafts`` (only with the V2 model runner; it
changes no grant; vllm/v1/core/sched/scheduler.py:732-734 (vLLM 0.33.0)).
The prover's pass skeleton follows 0.32's loop: a policy modelling 0.32 is proved at 0.32
(``proofs.symbolic.PROVED_VLLM_VERSION``).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping


@dataclass(frozen=True)
class VllmVersion:
    """The budget-path facts of one vLLM version that differ between versions."""

    version: str
    table: str  # the method table, a key of ``methods.TABLES``
    validation_reserves_lookahead: bool  # config check B > L (True) or B > d (False)
    draft_pass_caps_seqs: bool  # DFlash/DSpark admit at most B // L sequences into RUNNING
    self_preemption_ends_pass: bool  # priority: a request that preempts itself ends the running pass
    caches_blocks_at_output: bool  # with speculation, a decode's output publishes its completed blocks
    stop_cuts_computed: bool  # a stop that cuts output tokens takes them off the computed count too
    release: str
    parallel_drafting_knob: bool = True  # parallel drafting is a config knob (False: it follows the method)
    long_prefill_needs_chunking: bool = False  # long_prefill_token_threshold is read only with chunked prefill  # the release the row was read from

    def __post_init__(self) -> None:
        assert self.table.startswith("vllm-"), self.table


VLLM_VERSIONS: Mapping[str, VllmVersion] = {
    # version:  method table  B > L  B // L cap  self-preemption ends pass  cache at output  stop cuts computed  release
    "0.32": VllmVersion("0.32", "vllm-0.32", False, False, True, False, False, "0.32.0"),
    "0.33": VllmVersion("0.33", "vllm-0.33", True, True, False, True, True, "0.33.0"),
    "0.34": VllmVersion("0.34", "vllm-0.34", True, True, False, True, True, "0.34.0", parallel_drafting_knob=False,
                        long_prefill_needs_chunking=True),
}
MODELLED: tuple[str, ...] = tuple(VLLM_VERSIONS)
NEWEST = MODELLED[-1]
# A config without engine_version follows 0.33, not the newest: 0.34 refuses parallel drafting for
# every method but DFlash and DSpark, which the shipped traces and users' configs written without a
# version use.
DEFAULT_VERSION = "0.33"
DRAFT_PASS_METHODS = ("dflash", "dspark")  # the methods that draft in a pass of their own (0.33)


def rules_for(version: str | None, table: str) -> VllmVersion:
    """The row of ``version``; without one (a policy with no version table) the row whose
    method table is ``table``, else the newest."""
    if version is not None:
        return VLLM_VERSIONS[version]
    return next((row for row in VLLM_VERSIONS.values() if row.table == table), VLLM_VERSIONS[NEWEST])


def release_key(version: str) -> tuple[int, ...]:
    """'0.33.0rc1.dev5+g1234' -> (0, 33, 0): the leading numeric release parts."""
    parts = []
    for piece in version.split("+")[0].split("."):
        digits = ""
        for ch in piece:
            if not ch.isdigit():
                break
            digits += ch
        if not digits:
            break
        parts.append(int(digits))
        if digits != piece:
            break
    return tuple(parts)


def modelled_version(version: str) -> str | None:
    """The modelled 'MAJOR.MINOR' a release string belongs to ('0.33.0' -> '0.33'), or None."""
    key = release_key(version)[:2]
    return next((v for v in MODELLED if release_key(v) == key), None)


def nearest_version(version: str) -> str:
    """The modelled version closest to ``version``: its own, else the newest modelled one at
    or below it, else the oldest (a release string with no number is taken as the newest)."""
    own = modelled_version(version)
    if own is not None:
        return own
    key = release_key(version)[:2]
    if not key:
        return NEWEST
    below = [v for v in MODELLED if release_key(v) <= key]
    return below[-1] if below else MODELLED[0]
