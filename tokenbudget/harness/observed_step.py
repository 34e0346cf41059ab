"""ObservedStep: what one step of a real engine did, read off the engine's own objects."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Hashable, Mapping, Optional

from ..spec.records import RequestState, StepLimits, StepRecord, pass_record


@dataclass
class ObservedStep:
    """One engine step as its driver read it: per scheduled request its grant, drafts,
    computed tokens before it and token count; the preemptions and the engine's own aborts in
    order; the queues, KV blocks in use and block tables after the pass, before its output
    (``running`` None until read); ``requests`` the state of every request the step touched
    once its output was applied; ``error`` an exception raised inside the engine's code;
    ``fingerprint`` the scheduler state before the step."""

    num_scheduled_tokens: dict[str, int] = field(default_factory=dict)
    scheduled_draft_tokens: dict[str, int] = field(default_factory=dict)
    computed_before: dict[str, int] = field(default_factory=dict)
    num_tokens: dict[str, int] = field(default_factory=dict)
    prefill: set[str] = field(default_factory=set)
    paused: frozenset[str] = frozenset()  # running decodes the worker paused: 0 rows, no grant
    preempted: tuple[str, ...] = ()
    aborted: tuple[str, ...] = ()  # requests the engine itself aborted inside the step
    running: Optional[tuple[str, ...]] = None
    waiting: tuple[str, ...] = ()
    kv_blocks_in_use: int = 0
    block_tables: dict[str, tuple[int, ...]] = field(default_factory=dict)
    block_keys: dict[int, object] = field(default_factory=dict)  # blocks more than one table holds: content keys
    requests: dict[str, RequestState] = field(default_factory=dict)
    error: Optional[str] = None
    fingerprint: Hashable = None

    def record(self, step: int, limits: StepLimits, runner_rows: Mapping[str, int]) -> StepRecord:
        """The spec's record of this step as step ``step``; ``runner_rows`` the rows each
        scheduled request occupies (the engine's runner rule); drafts default to 0."""
        grants = self.num_scheduled_tokens
        drafts = self.scheduled_draft_tokens
        return pass_record(
            step, limits, dict(grants), {rid: drafts.get(rid, 0) for rid in grants}, dict(runner_rows),
            dict(self.computed_before), dict(self.num_tokens), self.prefill, self.preempted, self.running or (),
            self.waiting, self.kv_blocks_in_use, dict(self.block_tables), dict(self.block_keys),
            paused=self.paused, error=self.error, fingerprint=self.fingerprint)
