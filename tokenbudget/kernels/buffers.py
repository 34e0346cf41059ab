"""Persistent input buffers sized to B rows, as a real model runner preallocates them.

A step claims its rows before writing any: ``claim(step, rows)`` takes views of the first
``rows`` rows of the token-id, position and slot-mapping tensors. More rows than B is an
out-of-range view of the preallocated tensors, which torch refuses; that refusal is
raised as InputRowsOverflow, naming the step, the rows and B, before anything is written.

With ``growable`` (the CUDA memory-cap mode) the buffers behave like a framework with
dynamic shapes instead: a step with more rows allocates what it needs, and only the
allocator's cap can stop it.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from .errors import InputRowsOverflow


@dataclass(frozen=True)
class StepInputs:
    """The rows of one step: views into the persistent buffers (or fresh tensors when grown)."""

    token_ids: Tensor
    positions: Tensor
    slots: Tensor  # KV slot of each row; -1 for a row that writes no KV


class InputBuffers:
    def __init__(self, rows: int, device: torch.device | str, growable: bool = False) -> None:
        self.rows = rows
        self.growable = growable
        self._device = torch.device(device)
        self.token_ids = torch.zeros(rows, dtype=torch.long, device=self._device)
        self.positions = torch.zeros(rows, dtype=torch.long, device=self._device)
        self.slots = torch.full((rows,), -1, dtype=torch.long, device=self._device)

    def claim(self, step: int, rows: int) -> StepInputs:
        """Views of the first ``rows`` rows; InputRowsOverflow past B unless growable."""
        try:
            return StepInputs(self.token_ids.narrow(0, 0, rows), self.positions.narrow(0, 0, rows),
                              self.slots.narrow(0, 0, rows))
        except RuntimeError:  # "start (0) + length (rows) exceeds dimension size (B)"
            if not self.growable:
                raise InputRowsOverflow(step, rows, self.rows) from None
        return StepInputs(torch.zeros(rows, dtype=torch.long, device=self._device),
                          torch.zeros(rows, dtype=torch.long, device=self._device),
                          torch.full((rows,), -1, dtype=torch.long, device=self._device))
