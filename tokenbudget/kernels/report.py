"""What the runner saw, step by step: rows against B, KV blocks, time, memory, the verdict.

``StepReport`` is one step as the runner executed it (or failed to: ``fault``);
``RunnerReport`` the whole run with the runner's acceptance rate and throughput.
``to_json`` is the ``--json`` form of ``tokenbudget replay --target runner``.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from .models import ModelSpec

MIB = 2**20


@dataclass(frozen=True)
class MemoryCap:
    """The CUDA allocator cap: sized from a B-row profile step plus a margin."""

    cap_bytes: int
    baseline_bytes: int  # weights, KV pool and buffers
    profile_peak_bytes: int  # what the B-row profile step allocated at its peak, above the baseline


@dataclass(frozen=True)
class StepReport:
    step: int
    rows: dict[str, int]  # runner rows per scheduled request, in layout order
    capacity: int  # B
    tokens: int  # target tokens scheduled (sum of grants)
    kv_blocks: int  # blocks in use after the pass
    kv_pool: int
    seconds: float
    peak_bytes: int | None  # CUDA: peak allocated during the step
    verified: int  # drafts the target verified
    matched: int  # of them, accepted by the runner's own rule
    committed: int  # tokens appended to sequences
    fault: str | None  # the exception that stopped the step, as "Type: message"

    @property
    def total_rows(self) -> int:
        return sum(self.rows.values())

    def to_json(self) -> dict[str, Any]:
        doc = asdict(self)
        doc["total_rows"] = self.total_rows
        return doc


@dataclass
class RunnerReport:
    device: str
    mode: str  # forced | live
    rule: str  # greedy | rejection
    model: ModelSpec
    memory_cap: MemoryCap | None = None
    steps: list[StepReport] = field(default_factory=list)

    @property
    def fault(self) -> str | None:
        return next((s.fault for s in self.steps if s.fault is not None), None)

    @property
    def acceptance(self) -> float | None:
        """Drafts the runner's own rule accepted, over drafts verified (None: none verified)."""
        verified = sum(s.verified for s in self.steps)
        return sum(s.matched for s in self.steps) / verified if verified else None

    def throughput(self) -> tuple[float, float]:
        """(scheduled tokens, committed tokens) per second over the executed steps."""
        done = [s for s in self.steps if s.fault is None]
        seconds = sum(s.seconds for s in done)
        if not seconds:
            return 0.0, 0.0
        return sum(s.tokens for s in done) / seconds, sum(s.committed for s in done) / seconds

    def to_json(self) -> dict[str, Any]:
        tokens_per_s, committed_per_s = self.throughput()
        return {
            "device": self.device, "mode": self.mode, "acceptance_rule": self.rule, "model": asdict(self.model),
            "memory_cap": asdict(self.memory_cap) if self.memory_cap else None,
            "fault": self.fault, "acceptance": self.acceptance,
            "drafts_verified": sum(s.verified for s in self.steps),
            "drafts_matched": sum(s.matched for s in self.steps),
            "tokens_per_second": tokens_per_s, "committed_tokens_per_second": committed_per_s,
            "steps": [s.to_json() for s in self.steps],
        }
