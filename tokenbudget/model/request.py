"""Request: one generation request as the scheduler sees it."""
from __future__ import annotations

import enum
from dataclasses import dataclass, field


class Status(enum.Enum):
    WAITING = "waiting"
    RUNNING = "running"
    PREEMPTED = "preempted"  # waiting again, to be recomputed
    FINISHED = "finished"
    ABORTED = "aborted"


@dataclass(eq=False)
class Request:
    """Token counts of one request. Token contents are abstract: position i of the prompt
    belongs to ``prefix_group`` when ``i < prefix_len`` and to the request alone otherwise.
    """

    request_id: str
    num_prompt_tokens: int
    max_tokens: int
    arrival: int
    priority: int = 0
    prefix_group: str | None = None
    prefix_len: int = 0
    status: Status = Status.WAITING
    num_computed_tokens: int = 0
    num_output_tokens: int = 0
    num_draft_tokens: int = 0  # drafts proposed for the next step
    num_preemptions: int = 0
    is_prefill_chunk: bool = True  # prompt (or recompute) tokens left after the last pass
    block_ids: list[int] = field(default_factory=list)  # the pool appends to it or replaces it, nothing else
    num_cached_blocks: int = 0  # leading blocks whose content key the pool already knows
    _table: tuple[int, ...] = field(default=(), init=False, repr=False)
    _table_of: list[int] | None = field(default=None, init=False, repr=False)

    @property
    def num_tokens(self) -> int:
        """Prompt plus output tokens (drafts excluded)."""
        return self.num_prompt_tokens + self.num_output_tokens

    @property
    def num_tokens_with_spec(self) -> int:
        return self.num_tokens + self.num_draft_tokens

    @property
    def is_decoding(self) -> bool:
        """Running past prefill: only the last sampled token (and drafts) is left to compute."""
        return self.status is Status.RUNNING and not self.is_prefill_chunk

    @property
    def is_finished(self) -> bool:
        return self.status in (Status.FINISHED, Status.ABORTED)

    def block_key(self, index: int, block_size: int, lookahead: int = 0) -> tuple[str, str, int]:
        """Content key of full block ``index`` (and the ``lookahead`` tokens after it): shared
        by a prefix group while those tokens lie wholly inside the group's prefix, private
        to the request otherwise."""
        if self.prefix_group is not None and (index + 1) * block_size + lookahead <= self.prefix_len:
            return ("group", self.prefix_group, index)
        return ("request", self.request_id, index)

    def block_table(self) -> tuple[int, ...]:
        """``block_ids`` as a tuple, built again only when they changed: the same list at the
        same length holds the same blocks, since the pool only appends to it or replaces it."""
        ids = self.block_ids
        if self._table_of is not ids or len(self._table) != len(ids):
            self._table, self._table_of = tuple(ids), ids
        return self._table
