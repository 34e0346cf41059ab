"""The documented ways in which the model (``sglang-0.5.23``) and SGLang 0.5.23's code
disagree, each with its SPEC.md §10 entry. Conformance attaches the first matching entry
to a divergence; one that matches none is unexplained and fails the run. Each entry checks
its mechanism on the model's state at the divergent step (the trace replayed on the model
up to it), never on a message.

* ``sglang-grant-clip`` (a simplification, SPEC.md §10 simplification 3): near
  ``max_model_len`` the model clips a decode's grant to ``max_model_len - computed - 1``;
  SGLang's verify always runs ``num_draft_tokens = 1 + k`` rows.
* ``sglang-prefill-reservation`` (a model gap, SPEC.md §10 conformance): SGLang 0.5.23's
  prefill reserves more KV than the model charges, so the model admits a request that
  SGLang refuses (NO_TOKEN): every admission asks ``extend + max_new + page <
  rem_total_tokens`` and reserves ``page_ceil(extend) + page + min(max_new_tokens, 4096)``
  (``per_req_token_overhead``, schedule_policy.py:1409-1414, the charge of
  ``_select_prefill_admission`` :1637, ``PrefillBudget.reserve``, prefill_budget.py:156-169;
  a retracted request is charged its whole max_new_tokens), and the chunk that finishes a
  prompt reserves a page and its max_new too (``add_chunked_req``, schedule_policy.py:1206-1216).
  The check replays SGLang's arithmetic on the model's state: the first request the model
  admits and SGLang does not is one SGLang's rule refuses and the model's admits. Or, one
  step later: SGLang's refusal (NO_TOKEN) set ``batch_is_full`` at the previous prefill, where
  the model stopped on another budget, so SGLang decodes now where the model prefills: the
  next waiting request after the previous prefill is one SGLang's rule refuses and the
  model's admits, and the model with its latch set schedules exactly SGLang's step.
* ``sglang-chunk-page-floor`` (a model gap, SPEC.md §10 conformance): SGLang cuts a
  continuing chunk to ``min(extend, rem_chunk_tokens, rem_total_tokens)`` (or the chunk
  budget when no KV budget is left), not floored to a page (``add_chunked_req``,
  schedule_policy.py:1140-1183; only a first admission's cut is floored, :1656-1666); the
  model floors it to a page and keeps a page-ceiled extend whole only when it fits. The
  check: the first grant that differs is the continuing chunk's, and SGLang's is that rule.
* ``sglang-abort-latch`` (a model gap, SPEC.md §10 conformance): when a running request is
  aborted, SGLang's running batch shrinks and ``batch_is_full`` is cleared (the per-step
  ``filter_batch``, scheduler.py:3964-3968; the abort itself, ``abort_request`` :5797-5811);
  the model keeps the latch, so it decodes where SGLang prefills. The check: the model's
  latch is set, a request running at the step before was aborted since, and the model with
  the latch cleared schedules exactly SGLang's step.
"""
from __future__ import annotations

import copy
from typing import Mapping

from ...model import BudgetConfig, get_policy
from ...model.sglang_loop import CLIP_MAX_NEW_TOKENS, SglangLoop
from ...model.target import ModelTarget
from ...spec.execution import Execution
from ...spec.intlike import cdiv
from ...spec.trace import AbortOp, StepOp, Trace
from ..known_divergences import KnownDivergence
from ..lockstep import Lockstep

SPEC = "SPEC.md §10 conformance"


def model_before(trace: Trace, step: int) -> SglangLoop | None:
    """The model's loop after the trace's ops before step op ``step``; None for another loop."""
    target = ModelTarget(BudgetConfig.from_dict(trace.config), get_policy(trace.policy))
    run, seen = Execution(target), 0
    for op in trace.ops:
        if isinstance(op, StepOp):
            if seen == step:
                break
            seen += 1
        run.apply(op)
    loop = target.scheduler
    return loop if isinstance(loop, SglangLoop) else None


def _grant_clip(r: Lockstep) -> bool:
    """Every differing grant is a decode the model clipped at max_model_len, SGLang's 1 + k."""
    if r.model is None or r.vllm is None or r.vllm.error or r.config is None or r.model_run is None:
        return False
    if not set(r.fields) <= {"num_scheduled_tokens", "scheduled_draft_tokens", "finished"}:
        return False
    m, v, cfg = r.model.num_scheduled_tokens, r.vllm.num_scheduled_tokens, r.config
    rows, step = 1 + cfg.num_speculative_tokens, r.model_run.steps[-1]
    if set(m) != set(v):
        return False
    differing = [rid for rid in m if m[rid] != v[rid]]
    return bool(differing) and all(
        v[rid] == rows and m[rid] == cfg.max_model_len - step.computed_before[rid] - 1 < rows
        and r.model.scheduled_draft_tokens.get(rid, 0) == m[rid] - 1 for rid in differing)


def _max_new_tokens(loop: SglangLoop, rid: str) -> int:
    """SGLang's ``sampling_params.max_new_tokens``: max_tokens clipped to the context."""
    req = loop.requests[rid]
    return min(req.max_tokens, loop.cfg.max_model_len - req.num_prompt_tokens, CLIP_MAX_NEW_TOKENS)


def sglang_refuses(loop: SglangLoop, model: Mapping[str, int], engine: Mapping[str, int]) -> bool:
    """In the model's prefill ``model`` (grants in order) on the state ``loop``, the first
    request SGLang did not take as the model did is one SGLang's KV budget refuses and the
    model's admits; the ones before it SGLang took alike."""
    page, decoding = loop.page, [r for r in loop.running if r.is_decoding]
    if any(rid in {r.request_id for r in decoding} for rid in model):
        return False  # not a prefill step of the model
    future = sum(loop.max_new_estimate(r) * loop.new_token_ratio for r in decoding)
    rem_sglang = rem_model = loop.available() - future
    for rid, grant in model.items():
        req = loop.requests[rid]
        extend = req.num_tokens - req.num_computed_tokens
        chunk = loop.chunked is req
        if engine.get(rid) != grant:
            estimate = loop.max_new_estimate(req)
            return not chunk and (rem_sglang <= 0 or not extend + estimate + page < rem_sglang) \
                and extend + estimate < rem_model
        finishes = grant == extend
        rem_sglang -= cdiv(grant, page) * page + page + (_max_new_tokens(loop, rid) if finishes else 0)
        rem_model -= cdiv(grant, page) * page + (0 if chunk else loop.max_new_estimate(req))
    return False


def _prefill_reservation(r: Lockstep) -> bool:
    if r.model is None or r.vllm is None or r.vllm.error or r.step is None or r.trace is None or r.model.preempted:
        return False
    if r.model.scheduled_draft_tokens:
        return False
    loop = model_before(r.trace, r.step)
    engine = {} if r.vllm.scheduled_draft_tokens else r.vllm.num_scheduled_tokens  # SGLang decoded: no prefill
    return loop is not None and sglang_refuses(loop, r.model.num_scheduled_tokens, engine)


def _reservation_latch(r: Lockstep) -> bool:
    if r.model is None or r.vllm is None or r.vllm.error or not r.step or r.trace is None or r.model_run is None:
        return False
    if r.model.scheduled_draft_tokens or not r.vllm.scheduled_draft_tokens or len(r.model_run.steps) < 2:
        return False
    loop = model_before(r.trace, r.step)
    if loop is None or loop.batch_is_full:
        return False
    twin = copy.deepcopy(loop)
    twin.batch_is_full = True
    if dict(twin.schedule().num_scheduled_tokens) != dict(r.vllm.num_scheduled_tokens):
        return False
    before = model_before(r.trace, r.step - 1)
    granted = dict(r.model_run.steps[-2].num_scheduled_tokens)
    if before is None or not granted:
        return False
    candidate = next((q for q in before.waiting if q.request_id not in granted), None)
    if candidate is None:
        return False
    wanted = {**granted, candidate.request_id: candidate.num_tokens}
    return sglang_refuses(before, wanted, granted)


def _reservation(r: Lockstep) -> bool:
    return _prefill_reservation(r) or _reservation_latch(r)


def _chunk_page_floor(r: Lockstep) -> bool:
    if r.model is None or r.vllm is None or r.vllm.error or r.step is None or r.trace is None:
        return False
    loop = model_before(r.trace, r.step)
    if loop is None or loop.chunked is None:
        return False
    m, v = r.model.num_scheduled_tokens, r.vllm.num_scheduled_tokens
    first = next((rid for rid in m if m[rid] != v.get(rid)), None)
    req = loop.chunked
    if first != req.request_id or first not in v:
        return False
    decoding = [q for q in loop.running if q.is_decoding]
    rem = int(loop.available() - sum(loop.max_new_estimate(q) * loop.new_token_ratio for q in decoding))
    budget = loop.cfg.max_num_batched_tokens
    return v[first] == min(req.num_tokens - req.num_computed_tokens, min(budget, rem) if rem > 0 else budget)


def _aborted_since_last_step(trace: Trace, step: int) -> set[str]:
    """The requests aborted between step op ``step - 1`` and step op ``step``."""
    aborted: set[str] = set()
    seen = 0
    for op in trace.ops:
        if isinstance(op, StepOp):
            if seen == step:
                return aborted
            seen += 1
            aborted = set()
        elif isinstance(op, AbortOp):
            aborted.add(op.id)
    return aborted


def _abort_latch(r: Lockstep) -> bool:
    if r.model is None or r.vllm is None or r.vllm.error or not r.step or r.trace is None or r.model_run is None:
        return False
    running_before = set(r.model_run.steps[-2].running) if len(r.model_run.steps) >= 2 else set()
    if not running_before & _aborted_since_last_step(r.trace, r.step):
        return False
    loop = model_before(r.trace, r.step)
    if loop is None or not loop.batch_is_full:
        return False
    twin = copy.deepcopy(loop)
    twin.batch_is_full = False
    return dict(twin.schedule().num_scheduled_tokens) == dict(r.vllm.num_scheduled_tokens)


KNOWN: tuple[KnownDivergence, ...] = (
    KnownDivergence("sglang-grant-clip", "simplification", "SPEC.md §10 simplification 3",
                    "the model clips a decode's grant at max_model_len; SGLang verifies 1 + k rows", _grant_clip),
    KnownDivergence("sglang-prefill-reservation", "model-gap", SPEC,
                    "SGLang's prefill asks and reserves a page more per request and a finishing chunk's max_new; "
                    "the model admits a request SGLang refuses", _reservation),
    KnownDivergence("sglang-chunk-page-floor", "model-gap", SPEC,
                    "SGLang cuts a continuing chunk to its budgets without flooring it to a page; the model floors it",
                    _chunk_page_floor),
    KnownDivergence("sglang-abort-latch", "model-gap", SPEC,
                    "an aborted running request leaves SGLang's batch and clears batch_is_full; the model keeps "
                    "the latch and decodes where SGLang prefills", _abort_latch),
)


def explain(result: Lockstep) -> KnownDivergence | None:
    """The documented divergence this lockstep result shows, or None."""
    return next((k for k in KNOWN if k.matches(result)), None)
