"""What a step can do to a real model runner: the runner's faults, each naming the step.

A fault is an observation about the scheduler's step, not a bug of the runner: the step
asked for more than the runner physically has. ``str()`` is one line.
"""
from __future__ import annotations


class RunnerFault(Exception):
    """A step the runner could not execute."""

    def __init__(self, step: int, message: str) -> None:
        super().__init__(f"step {step}: {message}")
        self.step = step


class InputRowsOverflow(RunnerFault):
    """The step needs more input rows than the persistent buffers hold (B)."""

    def __init__(self, step: int, rows: int, capacity: int) -> None:
        super().__init__(step, f"needs {rows} input rows, the runner's buffers hold B = {capacity} "
                               f"(max_num_batched_tokens)")
        self.rows = rows
        self.capacity = capacity


class KVOverflow(RunnerFault):
    """A KV write falls outside the blocks the request holds."""

    def __init__(self, step: int, request_id: str, position: int, num_blocks: int, block_size: int) -> None:
        super().__init__(step, f"request {request_id!r} writes KV at position {position}, but its "
                               f"{num_blocks} blocks hold positions 0..{num_blocks * block_size - 1}")
        self.request_id = request_id
        self.position = position


class DeviceOutOfMemory(RunnerFault):
    """CUDA ran out of memory under the allocator cap (``--memory-cap``)."""

    def __init__(self, step: int, rows: int, cap_bytes: int) -> None:
        super().__init__(step, f"CUDA out of memory with {rows} rows under a cap of {cap_bytes / 2**20:.0f} MiB "
                               f"(sized for B rows)")
        self.rows = rows
        self.cap_bytes = cap_bytes
