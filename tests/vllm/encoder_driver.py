"""Multimodal requests on a real vLLM scheduler under the monitor: in this process, or as a
child on another vLLM folder (``python encoder_driver.py``: one JSON line of what the monitor
saw).

vLLM sizes the encoder budget and cache from a multimodal model's processor
(``MultiModalBudget``, scheduler.py:256-284 (vLLM 0.32.0)), which needs torchvision and the
model's processor files, neither of them here. So a text model's scheduler is given them as
its ``__init__`` gives them, the way vLLM's own tests do (test_scheduler.py:4586-4587 (vLLM
0.32.0)): ``max_num_encoder_input_tokens`` and an ``EncoderCacheManager`` of the cache size. Every encoder decision is then vLLM's own (``_try_schedule_encoder_inputs``,
the manager's ``can_allocate``, ``allocate``, ``free``).
"""
from __future__ import annotations

import json
import sys
from typing import Any

from tokenbudget import monitor
from tokenbudget.harness.vllm.engine import VllmEngine
from tokenbudget.model import BudgetConfig

CONFIG = BudgetConfig(max_num_batched_tokens=64, max_num_seqs=4, num_speculative_tokens=2, method="ngram",
                      block_size=4, num_kv_blocks=96, max_model_len=128)
ENCODER_BUDGET, ENCODER_CACHE = 16, 28  # embeddings
# Requests: id -> (prompt length, max_tokens, images as (offset, length, key, embedding mask or None)).
REQUESTS: dict[str, tuple[int, int, tuple[tuple[int, int, str, Any], ...]]] = {
    "a": (40, 4, ((4, 12, "A", None),)),
    "b": (40, 4, ((10, 12, "B", None),)),
    "c": (36, 4, ((20, 12, "A", None),)),  # the same image as a's
    "d": (44, 3, ((2, 8, "C", None), (20, 10, "D", (False, True, True, True, True, True, True, True, True, False)))),
    "e": (30, 3, ((6, 12, "B", None),)),  # b's image, again
}


def feature(offset: int, length: int, key: str, mask: Any) -> Any:
    """vLLM's ``MultiModalFeatureSpec`` of one image: its placeholder range and content key."""
    import torch
    from vllm.multimodal.inputs import MultiModalFeatureSpec, MultiModalKwargsItem, PlaceholderRange

    is_embed = None if mask is None else torch.tensor(mask)
    return MultiModalFeatureSpec(data=MultiModalKwargsItem.dummy(), modality="image", identifier=key,
                                 mm_position=PlaceholderRange(offset=offset, length=length, is_embed=is_embed))


def multimodal_engine(budget: int = ENCODER_BUDGET, cache: int = ENCODER_CACHE,
                      config: BudgetConfig = CONFIG) -> VllmEngine:
    """A vLLM engine whose scheduler has an encoder budget and cache of ``budget`` and ``cache``
    embeddings, as a multimodal model's would."""
    engine = VllmEngine(config)  # first: it picks the platform before vLLM's config binds one
    from vllm.v1.core.encoder_cache_manager import EncoderCacheManager

    engine.scheduler.max_num_encoder_input_tokens = budget
    engine.scheduler.encoder_cache_manager = EncoderCacheManager(cache_size=cache)
    return engine


def run(engine: VllmEngine, steps: int = 40) -> dict[str, Any]:
    """Drive ``engine`` under a monitor attached now with ``REQUESTS`` (three at first, the
    rest after two steps) for ``steps`` steps; what it saw, as JSON-able values."""
    watched = monitor.attach(engine.scheduler)
    for n, (rid, (prompt, max_tokens, images)) in enumerate(REQUESTS.items()):
        if n == 3:
            engine.step({})
            engine.step({})
        engine.add(rid, prompt, max_tokens, mm_features=[feature(*image) for image in images])
    for _ in range(steps):
        engine.step({})
    left = [rid for rid, r in engine.scheduler.requests.items() if not r.is_finished()]
    return {"steps": watched.stats.steps, "encoder_steps": watched.stats.encoder_steps, "unfinished": left,
            "violations": [[v.violation.invariant, str(v.violation)] for v in watched.violations]}


PRIORITY = BudgetConfig(max_num_batched_tokens=32, max_num_seqs=4, block_size=4, num_kv_blocks=18, max_model_len=128,
                        scheduling_policy="priority", enable_prefix_caching=False)


def run_priority_preemption(steps: int = 20) -> dict[str, Any]:
    """Under priority scheduling, a low-priority request whose chunk the running pass has
    scheduled with an encoder input is preempted later in the same pass by a more urgent one
    short of KV: what the monitor saw. With an encoder budget of one image a step, r's images
    are encoded one per step, so its third is scheduled in the step where h (admitted after r)
    runs out of blocks."""
    engine = multimodal_engine(budget=8, cache=64, config=PRIORITY)
    watched = monitor.attach(engine.scheduler)
    engine.add("r", 48, 4, priority=5, mm_features=[feature(4, 8, "I1", None), feature(16, 8, "I2", None),
                                                    feature(28, 8, "I3", None)])
    engine.step({})
    engine.add("h", 40, 4, priority=0)
    for _ in range(steps):
        engine.step({})
    return {"steps": watched.stats.steps, "encoder_steps": watched.stats.encoder_steps,
            "violations": [[v.violation.invariant, str(v.violation)] for v in watched.violations]}


if __name__ == "__main__":
    if sys.argv[1] == "priority-preemption":
        print(json.dumps(run_priority_preemption()))
    else:
        print(json.dumps(run(multimodal_engine(*map(int, sys.argv[2:4])))))
