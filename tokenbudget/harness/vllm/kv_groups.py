"""vLLM's KV cache groups as the spec's ``KvGroup``s: each group's kind read off the manager
vLLM built for it (one per group, all over one ``BlockPool``), or why a group is not judged.
The rules are the managers' own, the same in 0.32.0, 0.33.0 and 0.34.0 (SPEC.md §2
`kv-capacity`, "One rule per KV cache group")."""
from __future__ import annotations

from typing import Any, Union

from ...spec.kv_groups import CHUNKED_LOCAL, FULL, MAMBA, SLIDING_WINDOW, KvGroup

FULL_MANAGERS = ("FullAttentionManager", "SinkFullAttentionManager")  # tables hold every slot, none freed
NOT_JUDGED = {  # manager -> why its group is not judged
    "RSWAManager": "R-SWA frees a gap between the prompt and the window "
                   "(single_type_kv_cache_manager.py:900-930 (vLLM 0.32.0), :913 (0.33.0), :918 (0.34.0))",
    "CircularBufferManager": "a ring of one block per request: slots wrap "
                             "(single_type_kv_cache_manager.py:1173-1261 (vLLM 0.32.0), :1186 (0.33.0), :1191 (0.34.0))",
    "CrossAttentionManager": "cross-attention KV holds the encoder's tokens, allocated apart from the decoder's",
}
ALIGN_WHY = ("align-mode Mamba nulls and relocates state blocks inside the table "
             "(single_type_kv_cache_manager.py:1592-1641 (vLLM 0.32.0), :1608 (0.33.0), :1613 (0.34.0))")


def group_of(manager: Any) -> Union[KvGroup, str]:
    """The ``KvGroup`` of one single-type manager, or why its group is not judged."""
    name, size = type(manager).__name__, manager.block_size
    null = manager.block_pool.null_block.block_id
    if name in FULL_MANAGERS:
        return KvGroup(FULL, size, null_block=null)
    if name == "SlidingWindowManager":  # get_num_skipped_tokens: single_type_kv_cache_manager.py:1135-1170 (vLLM 0.32.0), :1148 (0.33.0), :1153 (0.34.0)
        return KvGroup(SLIDING_WINDOW, size, span=manager.sliding_window,
                       retained=manager.extra_retained_tokens, null_block=null)
    if name == "ChunkedLocalAttentionManager":  # get_num_skipped_tokens: :1368-1412 (vLLM 0.32.0), :1381 (0.33.0), :1386 (0.34.0)
        return KvGroup(CHUNKED_LOCAL, size, span=manager.attention_chunk_size, null_block=null)
    if name == "MambaManager":  # speculative blocks :1697-1703, skipped :1954-1959 (vLLM 0.32.0); :1717, :1971 (0.33.0); :1722, :1976 (0.34.0)
        if manager.mamba_cache_mode == "align":
            return ALIGN_WHY
        return KvGroup(MAMBA, size, extra_blocks=manager.num_speculative_blocks, null_block=null)
    return NOT_JUDGED.get(name, f"{name}: a manager whose table rule is not written here")


def groups(sched: Any) -> tuple[Union[KvGroup, str], ...]:
    """Each KV cache group of ``sched`` in vLLM's order: its ``KvGroup``, or why it is not judged."""
    return tuple(group_of(m) for m in sched.kv_cache_manager.coordinator.single_type_managers)


def judged(sched: Any) -> list[tuple[int, KvGroup]]:
    """The index and ``KvGroup`` of each group judged."""
    return [(index, group) for index, group in enumerate(groups(sched)) if isinstance(group, KvGroup)]


def beyond_one_full_group(sched: Any) -> bool:
    """Whether the judged groups are more than one full-attention group (``observe.blocks``'s)."""
    found = judged(sched)
    return len(found) > 1 or any(group.kind != FULL for _, group in found)
