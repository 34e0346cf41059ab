"""Every GPU check of the torch runner, in one short run for a lent CUDA machine."""
from __future__ import annotations

import gc
import os
import sys
import time
import traceback
from dataclasses import dataclass
from typing import Callable, Sequence

import torch

from ..spec.corpus import corpus_paths
from .replay import replay_on_runner
from ..spec.trace import AddOp, StepOp, Trace, load_trace
from .attention import Segment, dense_attend, paged_attend
from .models import ModelSpec, TinyLM
from .paged_kv import PagedKVCache, slot_mapping
from .report import MIB, RunnerReport
from .target import RunnerOptions
from .arrivals import extend

CLIMBING_REQUESTS = 512  # max_num_seqs: all of them decode at once
CLIMBING: dict[str, int | str] = {
    "max_num_batched_tokens": 2048, "max_num_seqs": CLIMBING_REQUESTS, "num_speculative_tokens": 5, "method": "mtp",
    "block_size": 16, "num_kv_blocks": 8192, "max_model_len": 256}
CLIMBING_STEPS = 14


@dataclass(frozen=True)
class Check:
    name: str
    ok: bool
    detail: str


def check_paged_equals_dense() -> Check:
    spec, block = ModelSpec(), 4
    model = TinyLM(spec, "cuda")
    cache = PagedKVCache(spec.num_layers, 16, block, spec.num_heads, spec.head_dim, "cuda")
    cache.reserve(16)
    prefix = [5, 9, 17, 33, 65, 129, 7, 11]
    a, b, table_a, table_b = prefix + [40, 41, 42], prefix + [90, 91, 92], [3, 7, 1], [3, 7, 9]
    worst = 0.0
    with torch.inference_mode():
        for tokens, first, table in ((a, 0, table_a), (b, len(prefix), table_b)):
            context = slot_mapping(0, "r", table, torch.arange(len(tokens)), block).cuda()
            pos = torch.arange(first, len(tokens), device="cuda")
            attend = paged_attend(cache, context[first:], pos, [Segment(0, len(pos), context)])
            ids = torch.tensor(tokens[first:], device="cuda")
            paged = model.logits(model.hidden(ids, pos, attend, spec.num_layers))
            full = torch.arange(len(tokens), device="cuda")
            dense = model.logits(model.hidden(torch.tensor(tokens, device="cuda"), full, dense_attend(full),
                                              spec.num_layers))[first:]
            worst = max(worst, float((paged - dense).abs().max()))
    return Check("paged-equals-dense", worst < 1e-3, f"max |paged - dense| = {worst:.2e} (request b reads a's blocks)")


def check_fastdeploy_overflow() -> Check:
    path = next(p for p in corpus_paths() if p.stem == "fastdeploy-reserve-rows-overflow")
    _, target = replay_on_runner(load_trace(path), RunnerOptions(device="cuda"))
    assert target is not None
    steps = target.report.steps
    ok = [s.fault is None for s in steps] == [True, True, False] and steps[-1].total_rows == 528 and \
        (steps[-1].fault or "").startswith("InputRowsOverflow")
    return Check("fastdeploy-overflow", ok, f"{steps[-1].fault}; peak MiB per step "
                                            f"{_mib([s.peak_bytes for s in steps])}")


def check_live_within_b() -> Check:
    base = Trace(policy="vllm-adaptive", config={
        "max_num_batched_tokens": 64, "max_num_seqs": 8, "num_speculative_tokens": 3, "method": "eagle3",
        "block_size": 16, "num_kv_blocks": 24, "max_model_len": 256}, ops=())
    result, target = replay_on_runner(extend(base, 100, seed=0), RunnerOptions(device="cuda", mode="live"))
    assert target is not None
    rows = max(s.total_rows for s in target.report.steps)
    acceptance = target.report.acceptance or 0.0
    ok = not result.errors and not result.violations and rows <= 64 and 0.1 < acceptance < 0.95
    scheduled, committed = target.report.throughput()
    return Check("live-within-b", ok, f"max rows {rows}/64, acceptance {acceptance:.2f}, "
                                      f"{scheduled:.0f} scheduled tokens/s, errors {list(result.errors)}")


def climbing_workload(policy: str) -> Trace:
    """512 requests of 64 prompt tokens and 64 outputs, all waiting from the start."""
    adds = tuple(AddOp(f"r{i}", 64, 64) for i in range(CLIMBING_REQUESTS))
    return Trace(policy=policy, config=CLIMBING, ops=adds + (StepOp(),) * CLIMBING_STEPS)


def run_capped(policy: str) -> RunnerReport:
    try:
        result, target = replay_on_runner(climbing_workload(policy),
                                          RunnerOptions(device="cuda", model="wide", memory_cap=True))
        if target is None:
            why = [result.refusal or ""] + list(result.errors) + [v.message for v in result.violations]
            raise RuntimeError(f"{policy}: the runner was not built: {'; '.join(w for w in why if w)}")
        return target.report
    finally:
        torch.cuda.set_per_process_memory_fraction(1.0)
        gc.collect()
        torch.cuda.empty_cache()


def check_memory_cap() -> Check:
    bad, good = run_capped("fastdeploy-v0"), run_capped("vllm-adaptive")
    bad_peaks = [s.peak_bytes or 0 for s in bad.steps if s.fault is None]
    good_peaks = [s.peak_bytes or 0 for s in good.steps]
    cap = good.memory_cap.cap_bytes if good.memory_cap else 0
    climbed = len(bad_peaks) >= 2 and bad_peaks[-1] > bad_peaks[0]
    bad_ok = (bad.fault or "").startswith("DeviceOutOfMemory") and climbed
    good_ok = good.fault is None and all(s.total_rows <= s.capacity for s in good.steps) and max(good_peaks) <= cap
    detail = (f"fastdeploy-v0 rows {[s.total_rows for s in bad.steps]}, peak MiB {_mib(bad_peaks)}, {bad.fault}; "
              f"vllm-adaptive rows {[s.total_rows for s in good.steps]}, peak MiB {_mib(good_peaks)}, "
              f"cap {cap / MIB:.0f} MiB")
    return Check("memory-cap", bad_ok and good_ok, detail)


CHECKS: tuple[Callable[[], Check], ...] = (
    check_paged_equals_dense, check_fastdeploy_overflow, check_live_within_b, check_memory_cap,
)


def _mib(values: Sequence[int | None]) -> list[int]:
    return [round((v or 0) / MIB) for v in values]


def main() -> int:
    # Pages of 2 MiB instead of 20 MiB segments: the cap then sees allocations, not rounding.
    os.environ.setdefault("PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:True")  # before CUDA starts
    if not torch.cuda.is_available():
        print("gpu_check: no CUDA device is available; run it on a machine with a GPU", file=sys.stderr)
        return 2
    torch.manual_seed(0)
    print(f"gpu_check on {torch.cuda.get_device_name()} (torch {torch.__version__})", flush=True)
    failed = 0
    for check in CHECKS:
        start = time.perf_counter()
        try:
            result = check()
        except Exception as exc:  # a broken check is a failed one; the others still run
            where = traceback.extract_tb(exc.__traceback__)[-1]
            result = Check(check.__name__.removeprefix("check_").replace("_", "-"), False,
                           f"raised {type(exc).__name__}: {exc} at {where.filename}:{where.lineno}")
        failed += not result.ok
        print(f"{'ok  ' if result.ok else 'FAIL'}  {result.name}  ({time.perf_counter() - start:.1f} s)  "
              f"{result.detail}", flush=True)
    print("gpu_check: all passed" if not failed else f"gpu_check: {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
