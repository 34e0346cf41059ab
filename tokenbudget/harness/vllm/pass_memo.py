"""PassMemo: what the records of one vLLM scheduler's passes share, so a pass reads what it changed."""
from __future__ import annotations

from typing import Any, Optional

from ...model.waiting_snapshot import WaitingSnapshot


class PassMemo:
    """Kept across one scheduler's passes: the waiting ids (``WaitingSnapshot``: a queue of
    thousands compared pointer by pointer in C), each running request's block table with the
    block objects it was read from, and the blocks found shared at the last pass."""

    def __init__(self) -> None:
        self.waiting = WaitingSnapshot()
        self.tables: dict[str, tuple[list[Any], tuple[int, ...]]] = {}  # rid -> (blocks read, their ids)
        self.shared: tuple[int, ...] = ()

    def tables_and_shared(self, sched: Any, group: int, running: tuple[str, ...]
                          ) -> Optional[tuple[dict[str, tuple[int, ...]], dict[int, object]]]:
        """Each running request's table in KV group ``group`` and the hash of each block more
        than one holds; None where this vLLM keeps its tables otherwise, or where a block may
        be held outside the running tables (a KV-holding waiting request, a KV connector, a
        partial hit's copy-on-write). A table whose blocks are those read last, plus some at
        its end, costs the new ones; only blocks read afresh or shared last time are tested
        for sharing: a block gains a holder only when a request is admitted onto it (a table
        read afresh), and an appended block is fresh from the pool."""
        coordinator = sched.kv_cache_manager.coordinator
        try:
            held = coordinator.single_type_managers[group].req_to_blocks
        except AttributeError:
            held = None
        if (held is None or sched.kv_holding_waiting or getattr(sched, "connector", None) is not None
                or getattr(coordinator, "enable_partial_hash_hits", False)):
            self.tables, self.shared = {}, ()  # read whole: the next pass starts afresh
            return None
        # a new holder: touch (block_pool.py:752-766), an appended block: get_new_blocks (:666-699) in 0.32.0
        memo, tables, fresh = self.tables, {}, list(self.shared)
        for rid in running:
            blocks = held.get(rid, ())
            last = memo.get(rid)
            if last is not None and len(blocks) >= len(last[0]) and blocks[:len(last[0])] == last[0]:
                ids = last[1] if len(blocks) == len(last[0]) else last[1] + tuple(
                    [b.block_id for b in blocks[len(last[0]):]])
            else:
                ids = tuple([b.block_id for b in blocks])
                fresh += ids
            tables[rid] = ids
            memo[rid] = (list(blocks), ids)
        for rid in memo.keys() - tables.keys():
            del memo[rid]
        pool_blocks = sched.kv_cache_manager.block_pool.blocks
        shared = {b: pool_blocks[b].block_hash for b in fresh if pool_blocks[b].ref_cnt > 1}
        self.shared = tuple(shared)
        return tables, shared
