"""What a runner deployment takes up front, and its refusal when the machine cannot hold it.

The runner preallocates its B-row input buffers (three int64 tensors) and a step of B
rows needs activations in proportion (the residual stream, q/k/v, the MLP); with the
CUDA memory cap it also holds the whole KV pool. ``check_fits`` compares that estimate
with the memory the device has available and refuses, naming the limit and the knob,
before torch is asked for any of it.
"""
from __future__ import annotations

import os

import torch

from ..model import ConfigError
from ..spec.records import StepLimits
from .models import ModelSpec

INT64, FLOAT32 = 8, 4
BUFFERS_PER_ROW = 3 * INT64  # token ids, positions, slots


def bytes_per_row(spec: ModelSpec) -> int:
    """Buffers plus one row's activations in a layer: residual, q/k/v, attention out, MLP."""
    return BUFFERS_PER_ROW + FLOAT32 * (5 * spec.hidden_size + 3 * spec.mlp_size)


def kv_pool_bytes(limits: StepLimits, spec: ModelSpec) -> int:
    """K and V of every slot of the pool, in every layer."""
    return 2 * spec.num_layers * limits.num_kv_blocks * limits.block_size * spec.hidden_size * FLOAT32


def needed_bytes(limits: StepLimits, spec: ModelSpec, whole_pool: bool) -> int:
    return limits.max_num_batched_tokens * bytes_per_row(spec) + (kv_pool_bytes(limits, spec) if whole_pool else 0)


def available_bytes(device: torch.device) -> int:
    """Free memory on the device: CUDA's free memory, or the host's MemAvailable."""
    if device.type == "cuda":
        return int(torch.cuda.mem_get_info(device)[0])
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")


def check_fits(limits: StepLimits, spec: ModelSpec, device: torch.device, whole_pool: bool) -> None:
    """ConfigError (one line) when the deployment needs more than the device has free."""
    need, have = needed_bytes(limits, spec, whole_pool), available_bytes(device)
    if need <= have:
        return
    gib = 2**30
    per_row = bytes_per_row(spec)
    pool = f" plus the whole KV pool ({kv_pool_bytes(limits, spec) / gib:.1f} GiB)" if whole_pool else ""
    raise ConfigError(
        f"the runner needs about {need / gib:.1f} GiB for max_num_batched_tokens {limits.max_num_batched_tokens} "
        f"({per_row} bytes a row){pool}, but {device.type} has {have / gib:.1f} GiB free; lower "
        f"max_num_batched_tokens{' or num_kv_blocks' if whole_pool else ''} (at most about "
        f"{max(have - (need - limits.max_num_batched_tokens * per_row), 0) // per_row} rows fit)")
