"""``tensorrt_llm.bindings`` (the C++ extension): only the names scheduler.py reads on import or on
the Python scheduler's path. ``internal.batch_manager.PrefixReuseSummary`` replaces the nanobind
struct of cpp/include/tensorrt_llm/batch_manager/kvCacheManager.h (scheduler.py:29, 34-35); the
C++ schedulers (``internal.algorithms``), ``PeftCacheManager`` and ``ContextChunkingConfig`` are
named by BindCapacityScheduler / BindMicroBatchScheduler only, which the harness never builds:
calling them raises."""
from __future__ import annotations

import types
from dataclasses import dataclass
from typing import Any, Optional


@dataclass
class PrefixReuseSummary:
    """What a radix-tree walk found: the first block the request would add (None: none)."""

    first_new_block: Optional[int] = None
    num_reusable_tokens: int = 0


class _CppOnly:
    """A C++-bound class the Python scheduler path never builds."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        raise NotImplementedError(f"{type(self).__name__} is TensorRT-LLM's C++ class; the harness drives "
                                  "the Python schedulers (scheduler.py's Py* classes)")


class CapacityScheduler(_CppOnly):
    pass


class MicroBatchScheduler(_CppOnly):
    pass


class PeftCacheManager(_CppOnly):
    pass


class ContextChunkingConfig(_CppOnly):
    pass


batch_manager = types.SimpleNamespace(PrefixReuseSummary=PrefixReuseSummary, PeftCacheManager=PeftCacheManager,
                                      ContextChunkingConfig=ContextChunkingConfig)
algorithms = types.SimpleNamespace(CapacityScheduler=CapacityScheduler, MicroBatchScheduler=MicroBatchScheduler)
internal = types.SimpleNamespace(batch_manager=batch_manager, algorithms=algorithms)
