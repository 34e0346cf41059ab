"""Drive TensorRT-LLM's ``SimpleUnifiedScheduler`` (scheduler.py at 002f3cc3, real) one executor
iteration at a time, as PyExecutor does with ``use_python_scheduler=True``: the draft-token stamp,
``schedule_request``, pauses, ``prepare_resources``, the forward and ``update_resources`` emulated
over ``standins.llm_request.LlmRequest`` and ``kv_manager.KvCacheManager`` (SPEC.md §9, the real target).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Hashable, Mapping, Optional

from ..observed_step import ObservedStep
from ...model import BudgetConfig, ConfigError
from ...model.trtllm.deployments import GUARANTEED_NO_EVICT, MAX_REQUESTS, MAX_UTILIZATION
from ...spec.records import RequestState
from ...spec.target import describe
from . import runtime
from .kv_manager import KvCacheManager

CAPACITY_POLICIES = (GUARANTEED_NO_EVICT, MAX_UTILIZATION, MAX_REQUESTS)
CHUNKING_POLICIES = ("FIRST_COME_FIRST_SERVED", "EQUAL_PROGRESS", "FORCE_CHUNK")


@dataclass(frozen=True)
class Deployment:
    """How PyExecutor is set up beyond the config: the capacity policy, the chunking policy, the
    stamp for one-model speculation, and the KV the drafter writes past a sequence (L)."""

    capacity: str = GUARANTEED_NO_EVICT
    chunking: str = "FIRST_COME_FIRST_SERVED"
    stamps_one_model: bool = True
    lookahead: int = 0

    def __post_init__(self) -> None:
        if self.capacity not in CAPACITY_POLICIES:
            raise ConfigError(f"unknown TensorRT-LLM capacity policy {self.capacity!r}; "
                              f"choose one of {', '.join(CAPACITY_POLICIES)}")
        if self.chunking not in CHUNKING_POLICIES:
            raise ConfigError(f"unknown TensorRT-LLM chunking policy {self.chunking!r}; "
                              f"choose one of {', '.join(CHUNKING_POLICIES)}")


@dataclass
class TrtllmStep(ObservedStep):
    """An observed step with the rows each request ran (the emulated executor's, not a rule of the grant)."""

    runner_rows: dict[str, int] = field(default_factory=dict)


@dataclass
class _Books:
    """What the workload asked of a request, which ``pause`` does not keep."""

    prompt: int
    max_tokens: int
    outputs: int = 0
    status: str = "waiting"


class TrtllmEngine:
    """One deployment of TensorRT-LLM's scheduler for ``cfg``. Raises TrtllmUnavailable without
    scheduler.py, ConfigError for a config it cannot run."""

    def __init__(self, cfg: BudgetConfig, deployment: Deployment = Deployment(), path: Path | None = None) -> None:
        trt = runtime.load(path)
        self.trt, self.cfg, self.deployment = trt, cfg, deployment
        self.k = cfg.num_speculative_tokens
        self.one_model = cfg.method in ("mtp", "eagle3")
        self.stamps = self.k > 0 and (deployment.stamps_one_model or not self.one_model)
        self.kv = KvCacheManager(cfg.num_kv_blocks, cfg.block_size, cfg.max_model_len + deployment.lookahead)
        sched = trt["scheduler"]
        chunking = (deployment.chunking, cfg.block_size) if cfg.enable_chunked_prefill else None
        self.scheduler = sched.SimpleUnifiedScheduler(
            max_batch_size=cfg.max_num_seqs, max_num_tokens=cfg.max_num_batched_tokens,
            kv_cache_manager=None if deployment.capacity == MAX_REQUESTS else self.kv, peft_cache_manager=None,
            scheduler_policy=trt["CapacitySchedulerPolicy"][
                GUARANTEED_NO_EVICT if deployment.capacity == MAX_REQUESTS else deployment.capacity],
            ctx_chunk_config=chunking)
        self.active: list[Any] = []
        self.reqs: dict[str, Any] = {}
        self.books: dict[str, _Books] = {}
        self.dead: Optional[str] = None

    # -- requests ---------------------------------------------------------------------
    def add(self, rid: str, prompt_len: int, max_tokens: int) -> None:
        if rid in self.reqs:
            raise ValueError(f"request id {rid!r} was already added")
        if not 1 <= prompt_len < self.cfg.max_model_len or max_tokens < 1:
            raise ValueError(f"request {rid!r}: prompt_len must be 1..max_model_len-1 and max_tokens >= 1")
        req = self.trt["LlmRequest"](rid, prompt_len, min(max_tokens, self.cfg.max_model_len - prompt_len))
        self.reqs[rid], self.books[rid] = req, _Books(prompt_len, max_tokens)
        self.active.append(req)

    def abort(self, rid: str) -> None:
        """The request leaves the active list and frees its KV (``_handle_canceled_requests``)."""
        req = self.reqs.get(rid)
        if req is None or self.books[rid].status in ("finished", "aborted"):
            return
        self._end(req, "aborted")

    def _end(self, req: Any, status: str) -> None:
        self.active.remove(req)
        self.kv.remove_sequence(req.py_request_id)
        self.books[req.py_request_id].status = status

    # -- one iteration ------------------------------------------------------------------
    def step(self, accepted: Mapping[str, int]) -> TrtllmStep:
        out = TrtllmStep(fingerprint=self.fingerprint())
        if self.dead is not None:
            out.error = self.dead
            return out
        try:
            self._step(out, accepted)
        except Exception as exc:  # an exception inside TensorRT-LLM's code or its KV manager: dead after it
            self.dead = out.error = describe(exc)
            self._snapshot(out)
        touched = set(out.num_scheduled_tokens) | set(out.preempted)
        out.requests = {rid: self.state(rid) for rid in touched}
        return out

    def _step(self, out: TrtllmStep, accepted: Mapping[str, int]) -> None:
        for req in self.active:  # the stamp of _prepare_and_schedule_batch
            if req.is_generation_in_progress_state:
                req.draft_tokens = [0] * self.k if self.stamps else []
        result = self.scheduler.schedule_request(list(self.active), set())
        out.preempted = tuple(r.py_request_id for r in result.paused_requests)
        for req in result.paused_requests:
            req.pause(self.cfg.max_model_len - 1)
            self.kv.remove_sequence(req.py_request_id)
        contexts, generations = list(result.context_requests), list(result.generation_requests)
        lookahead = self.deployment.lookahead
        for req in contexts:  # prepare_resources
            if req.is_first_context_chunk:
                self.kv.add_sequence(req.py_request_id, req.prompt_len)
                self.kv.add_token(req.py_request_id, lookahead + req.num_draft_tokens)
        for req in generations:  # one-model: the drafts its last forward proposed, stamped or not
            self.kv.add_token(req.py_request_id, 1 + (self.k if self.one_model else req.num_draft_tokens))
        self._snapshot(out)
        for req in contexts:
            self._run_context(out, req)
        for req in generations:
            self._run_generation(out, req, accepted.get(req.py_request_id, 0))

    def _run_context(self, out: TrtllmStep, req: Any) -> None:
        rid = req.py_request_id
        chunk = req.context_chunk_size
        drafts = req.num_draft_tokens if req.is_last_context_chunk else 0  # drafts ride on the last chunk only
        out.num_scheduled_tokens[rid], out.scheduled_draft_tokens[rid] = chunk, drafts
        out.runner_rows[rid] = chunk + drafts
        out.computed_before[rid], out.num_tokens[rid] = req.context_current_position, req.num_tokens
        out.prefill.add(rid)
        req.move_to_next_context_chunk()
        if req.context_current_position >= req.prompt_len:  # the last chunk samples a token
            req.state = self.trt["LlmRequestState"].GENERATION_IN_PROGRESS
            self._commit(req, 1)

    def _run_generation(self, out: TrtllmStep, req: Any, accepted: int) -> None:
        rid = req.py_request_id
        ran = self.k if self.one_model else req.num_draft_tokens  # the forward's 1 + runtime_draft_len rows
        out.num_scheduled_tokens[rid], out.scheduled_draft_tokens[rid] = 1, ran
        out.runner_rows[rid] = 1 + ran
        out.computed_before[rid], out.num_tokens[rid] = req.num_tokens - 1, req.num_tokens
        self._commit(req, 1 + min(max(accepted, 0), ran))
        if rid in self.reqs and self.books[rid].status == "running":
            self.kv.resize(rid, req.num_tokens - 1 + self.deployment.lookahead)  # rewind_kv_cache

    def _commit(self, req: Any, tokens: int) -> None:
        """The sampler's tokens, up to max_new_tokens; the request finishes there."""
        rid = req.py_request_id
        books = self.books[rid]
        kept = min(tokens, req.prompt_len + req.max_new_tokens - req.num_tokens)
        req.num_tokens += kept
        books.outputs += kept
        books.status = "running"
        if req.num_tokens >= req.prompt_len + req.max_new_tokens:
            req.state = self.trt["LlmRequestState"].GENERATION_COMPLETE
            self._end(req, "finished")

    def _snapshot(self, out: TrtllmStep) -> None:
        """The requests holding KV (running) and the rest (waiting), in active order; the blocks."""
        held = self.kv.blocks
        out.running = tuple(r.py_request_id for r in self.active if r.py_request_id in held)
        out.waiting = tuple(r.py_request_id for r in self.active if r.py_request_id not in held)
        out.kv_blocks_in_use = self.kv.num_in_use
        out.block_tables = {rid: tuple(blocks) for rid, blocks in held.items()}

    def fingerprint(self) -> Hashable:
        """The scheduler state as a value: free blocks, each active request in order."""
        return (len(self.kv.free), tuple((r.py_request_id, r.state.value, r.context_current_position, r.num_tokens,
                                          r.prompt_len, self.kv.tokens.get(r.py_request_id)) for r in self.active))

    def state(self, rid: str) -> RequestState:
        req, books = self.reqs[rid], self.books[rid]
        status = books.status if books.status in ("finished", "aborted") else (
            "running" if rid in self.kv.blocks else "waiting")
        computed = req.context_current_position if req.is_context_init_state else req.num_tokens - (
            0 if status == "finished" else 1)
        return RequestState(status, computed, books.outputs, books.max_tokens, books.prompt)
