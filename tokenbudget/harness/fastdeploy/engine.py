"""Drive FastDeploy's ``ResourceManagerV1.schedule()`` on the CPU, one engine step at a time."""
from __future__ import annotations

import concurrent.futures
import os
import types
from dataclasses import asdict
from pathlib import Path
from typing import Any, Hashable, Mapping, Optional

from ...model import ConfigError
from ...model.fastdeploy import worker as worker
from ...spec.records import RequestState
from ...spec.target import describe
from ..observed_step import ObservedStep
from . import runtime


# The admission reserve's state: the output reserve (before #7498), the new-token ratio (#7498)
RESERVE_STATE = ("current_reserve_output_block_num_float", "can_relax_prefill_strategy", "new_token_ratio")


def build_config(fd: Mapping[str, Any], cfg: Any) -> Any:
    """FastDeploy's ``FDConfig`` for ``cfg``; ConfigError (one line) when FastDeploy's own
    startup check refuses it."""
    if not cfg.spec_enabled:
        raise ConfigError("the FastDeploy target drives speculative decoding (its worker's pause rule); set "
                          "num_speculative_tokens >= 1")
    args = fd["EngineArgs"](max_num_seqs=cfg.max_num_seqs, max_num_batched_tokens=cfg.max_num_batched_tokens,
                            block_size=cfg.block_size, num_gpu_blocks_override=cfg.num_kv_blocks,
                            max_model_len=cfg.max_model_len, enable_prefix_caching=cfg.enable_prefix_caching,
                            enable_chunked_prefill=cfg.enable_chunked_prefill)
    fd["envs"].ENABLE_V1_KVCACHE_SCHEDULER = 1  # off after EngineArgs on a CPU (args_utils.py:630)
    values = asdict(args)
    cache = fd["CacheConfig"](values)
    cache.bytes_per_token_per_layer = 1  # read by PrefixCacheManager's log line only
    model = types.SimpleNamespace(max_model_len=cfg.max_model_len, enable_mm=False, architectures=["tokenbudget"],
                                  mm_max_tokens_per_item=None, version=None, print=lambda: None)
    spec = types.SimpleNamespace(method=cfg.method, num_speculative_tokens=cfg.num_speculative_tokens)
    try:
        return fd["FDConfig"](model_config=model, cache_config=cache, parallel_config=fd["ParallelConfig"](values),
                              scheduler_config=fd["SchedulerConfig"](values),
                              graph_opt_config=args.create_graph_optimization_config(), speculative_config=spec)
    except (AssertionError, ValueError) as exc:
        raise ConfigError(f"FastDeploy refuses the config: {' '.join(str(exc).split())[:300]}") from None


class FastDeployEngine:
    """One deployment of FastDeploy's scheduler for ``cfg``. Raises FastDeployUnavailable
    without FastDeploy, ConfigError when FastDeploy refuses ``cfg``."""

    def __init__(self, cfg: Any, path: Path | None = None) -> None:
        fd = runtime.load(path)
        self.fd, self.cfg = fd, cfg
        self.k = cfg.num_speculative_tokens
        self.config = build_config(fd, cfg)
        # The scheduler's one shared-memory block (need_block_num_signal, for a worker that is not there) is named
        # after the worker queue's port, the same in every process; after this process instead, so that targets
        # in processes side by side never unlink each other's (resource_manager_v1.py:213-219 at 2a606e361).
        self.config.parallel_config.local_engine_worker_queue_port = os.getpid()
        self.rm = fd["resource_manager_v1"].ResourceManagerV1(cfg.max_num_seqs, self.config, 1, "mixed")
        # Unlinked at once, it stays mapped here and nothing is left behind when this process is stopped.
        self.rm.need_block_num_signal.shm.unlink()
        self.max_tokens: dict[str, int] = {}
        self.reqs: dict[str, Any] = {}
        self.paused: set[str] = set()
        self.groups: dict[str, int] = {}  # prefix groups in order of first use
        self.gone: dict[str, str] = {}  # finished or aborted requests: their status
        self.dead: Optional[str] = None

    # -- requests ---------------------------------------------------------------------
    def add(self, rid: str, prompt_len: int, max_tokens: int, prefix_group: str | None = None,
            prefix_len: int = 0) -> None:
        if prompt_len < 1 or max_tokens < 1:
            raise ValueError(f"request {rid!r}: prompt_len and max_tokens must be >= 1")
        if rid in self.reqs:
            raise ValueError(f"request id {rid!r} was already added")
        tokens = self._prompt(len(self.reqs), prompt_len, prefix_group, prefix_len)
        req = self.fd["Request"].from_dict({"request_id": rid, "prompt_token_ids": tokens,
                                            "prompt_token_ids_len": prompt_len, "max_tokens": max_tokens})
        self.reqs[rid], self.max_tokens[rid] = req, max_tokens
        self.rm.add_request(req)
        concurrent.futures.wait(req.async_process_futures)  # its preprocessing (no features: nothing) is done

    def _prompt(self, serial: int, prompt_len: int, group: str | None, prefix_len: int) -> list[int]:
        """Token ids in which requests share exactly their group's first ``prefix_len`` tokens
        (what the prefix cache hashes), every other token their own."""
        shared = [] if group is None else [(self.groups.setdefault(group, len(self.groups)) + 1) * 10**6 + j
                                           for j in range(min(prefix_len, prompt_len))]
        return shared + [10**9 + serial * 10**5 + j for j in range(prompt_len - len(shared))]

    def abort(self, rid: str) -> None:
        req = self.reqs.get(rid)
        if req is None or rid in self.gone:
            return
        self._finish(rid, "aborted")

    def _finish(self, rid: str, status: str) -> None:
        self.gone[rid] = status
        self.paused.discard(rid)
        req = self.reqs[rid]
        rm = self.rm
        if req in rm.waiting:  # finish_requests leaves a waiting request alone: drop it as recycle_abort_task does
            rm.waiting.remove(req)
            rm.requests.pop(rid, None)
            rm.req_dict.pop(rid, None)
            if req.idx is not None:  # a preempted request keeps its batch slot (resource_manager_v1.py:313-322)
                rm.tasks_list[req.idx] = None
                rm.stop_flags[req.idx] = True
            return
        self.rm.finish_requests(rid)

    # -- one step -----------------------------------------------------------------------
    def step(self, accepted: Mapping[str, int]) -> ObservedStep:
        out = ObservedStep(fingerprint=self.fingerprint())
        if self.dead is not None:
            out.error, out.running = self.dead, ()
            return out
        try:
            self._step(out, accepted)
        except Exception as exc:  # an exception inside FastDeploy's code: the target is dead after it
            self.dead = out.error = describe(exc)
            self._snapshot(out)
        touched = set(out.num_scheduled_tokens) | set(out.preempted)
        out.requests = {rid: self.state(rid) for rid in touched}
        return out

    def _snapshot(self, out: ObservedStep) -> None:
        """The queues, blocks and pauses after the pass, before the step's output."""
        rm = self.rm
        out.running = tuple(r.request_id for r in rm.running)
        out.waiting = tuple(r.request_id for r in rm.waiting)
        out.kv_blocks_in_use = rm.cache_manager.num_gpu_blocks - len(rm.cache_manager.gpu_free_block_list)
        out.block_tables = {r.request_id: tuple(r.block_tables) for r in rm.running}
        out.paused = frozenset(self.paused & set(out.running))

    def _step(self, out: ObservedStep, accepted: Mapping[str, int]) -> None:
        rt = self.fd["RequestType"]
        batch, _errors = self.rm.schedule()
        prefills: dict[str, tuple[int, int]] = {}
        preempted: list[str] = []
        for task in batch:
            kind = getattr(task, "task_type", None)
            if kind == rt.PREFILL:
                prefills[task.request_id] = (task.prefill_start_index, task.prefill_end_index)
            elif kind == rt.PREEMPTED:
                preempted.append(task.request_id)
            elif kind == rt.DECODE:
                self.paused.discard(task.request_id)  # new blocks: recover_decode_task
        self.paused.difference_update(preempted)
        out.preempted = tuple(preempted)
        for rid in preempted:  # the worker answers a preempt task with nothing to run
            self.rm.reschedule_preempt_task(rid)
        self._snapshot(out)
        cfg, k = self.cfg, self.k
        done: list[str] = []
        for req in list(self.rm.running):
            rid = req.request_id
            total = req.num_total_tokens
            if rid in prefills:
                start, end = prefills[rid]
                out.num_scheduled_tokens[rid], out.scheduled_draft_tokens[rid] = end - start, 0
                out.computed_before[rid], out.num_tokens[rid] = start, total
                out.prefill.add(rid)
                if end >= req.need_prefill_tokens:  # the prompt's last chunk samples a token
                    self._append(req, 0)
            elif req.num_computed_tokens >= req.need_prefill_tokens and rid not in self.paused:
                out.num_scheduled_tokens[rid], out.scheduled_draft_tokens[rid] = 1, k
                out.computed_before[rid], out.num_tokens[rid] = total - 1, total
                self._append(req, accepted.get(rid, 0))
            else:
                continue
            if worker.finished(len(req.output_token_ids), self.max_tokens[rid], req.num_total_tokens,
                               cfg.max_model_len):
                done.append(rid)
        for rid in done:
            self._finish(rid, "finished")
        for req in self.rm.running:
            if req.num_computed_tokens >= req.need_prefill_tokens and worker.decode_pauses(
                    req.num_total_tokens - 1, len(req.block_tables), k, cfg.block_size, cfg.max_model_len):
                self.paused.add(req.request_id)

    def _append(self, req: Any, accepted: int) -> None:
        """The token processor: one sampled token and ``accepted`` drafts, up to the stops."""
        kept = worker.tokens_kept(accepted, self.k, len(req.output_token_ids), self.max_tokens[req.request_id],
                                  req.num_total_tokens, self.cfg.max_model_len)
        req.output_token_ids.extend([1] * kept)
        status = self.fd["RequestStatus"]
        if getattr(status, "RUNNING_DECODE", None) is not None and req.status == status.RUNNING_PREFILL:
            req.status = status.RUNNING_DECODE  # a token came back (output/token_processor.py:908-909 at 564c78d78)

    def fingerprint(self) -> Hashable:
        """The scheduler state as a value: the free blocks, the admission reserve, each queued
        request in queue order (computed, total tokens, blocks held, paused)."""
        rm = self.rm

        def state(r: Any) -> tuple[object, ...]:
            return (r.request_id, r.num_computed_tokens, r.num_total_tokens, len(r.block_tables),
                    r.request_id in self.paused, str(r.status))

        reserve = tuple(getattr(rm, name, None) for name in RESERVE_STATE)
        return (len(rm.cache_manager.gpu_free_block_list), reserve, tuple(map(state, rm.running)),
                tuple(map(state, rm.waiting)), tuple(sorted(rm.to_be_rescheduled_request_id_set)))

    def state(self, rid: str) -> RequestState:
        req = self.reqs[rid]
        status = self.gone.get(rid)
        if status is None:
            status = "running" if req in self.rm.running else "waiting"
        return RequestState(status, req.num_computed_tokens, len(req.output_token_ids), self.max_tokens[rid],
                            req.prompt_token_ids_len)
