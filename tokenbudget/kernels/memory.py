"""The CUDA memory cap: an allocator sized for B rows, so that more rows run out of memory.

As vLLM's profile run does, the runner first holds everything a deployment holds from the
start (weights, the whole KV pool, the B-row buffers), then runs a dummy step of B rows:
one sequence through the target with dense attention, and logits for as many rows as a
step can verify (S * (k + 1), at most B). The activation peak of that step is what a step
within the budget needs. The per-process memory fraction is then set to that peak plus a
margin for the allocator's rounding, so a later step that needs more activation memory,
because it runs more rows than B, fails with a real ``torch.cuda.OutOfMemoryError``.
"""
from __future__ import annotations

import torch

from .attention import dense_attend
from .models import FIRST_TEXT_TOKEN
from .report import MemoryCap
from .runner import ModelRunner

MARGIN_BYTES = 64 * 2**20


def cap_allocator(runner: ModelRunner, margin_bytes: int = MARGIN_BYTES) -> MemoryCap:
    """Profile a B-row step on ``runner``'s CUDA device and cap the allocator there."""
    device, limits, model = runner.device, runner.limits, runner.model
    runner.cache.reserve(limits.num_kv_blocks)
    torch.cuda.synchronize(device)
    torch.cuda.empty_cache()
    baseline = torch.cuda.memory_allocated(device)
    torch.cuda.reset_peak_memory_stats(device)
    rows = limits.max_num_batched_tokens
    verify_rows = min(rows, limits.max_num_seqs * (limits.num_speculative_tokens + 1))
    with torch.inference_mode():
        positions = torch.arange(rows, device=device)
        token_ids = torch.full((rows,), FIRST_TEXT_TOKEN, dtype=torch.long, device=device)
        hidden = model.hidden(token_ids, positions, dense_attend(positions), model.spec.num_layers)
        model.logits(hidden[:verify_rows])
        del hidden
    torch.cuda.synchronize(device)
    peak = torch.cuda.max_memory_allocated(device)
    torch.cuda.empty_cache()
    cap = peak + margin_bytes
    index = device.index if device.index is not None else torch.cuda.current_device()  # torch wants an index here
    torch.cuda.set_per_process_memory_fraction(min(1.0, cap / torch.cuda.get_device_properties(index).total_memory),
                                               index)
    return MemoryCap(cap_bytes=cap, baseline_bytes=baseline, profile_peak_bytes=peak - baseline)
