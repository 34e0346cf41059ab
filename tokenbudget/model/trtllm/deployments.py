"""The TensorRT-LLM deployments the ``trtllm`` policies model, by ``engine_version``: scheduler.py at
002f3cc3 under each capacity policy PyCapacityScheduler dispatches on (scheduler.py:1929-1940).

The policy's "versions" are these deployments, the default (a config without ``engine_version``)
last: MAX_UTILIZATION, the shared admission gate with the pause of the last started request, which
the model ran before the capacity policies were told apart. GUARANTEED_NO_EVICT (TensorRT-LLM's
default) admits a context only while the blocks to completion of every started request and of it
fit (scheduler.py:1430-1561); MAX_REQUESTS is the scheduler without a KV manager (1931-1932):
no KV gate.
"""
from __future__ import annotations

from typing import Optional

COMMIT = "002f3cc3"
GUARANTEED_NO_EVICT, MAX_REQUESTS, MAX_UTILIZATION = "GUARANTEED_NO_EVICT", "MAX_REQUESTS", "MAX_UTILIZATION"
DEPLOYMENTS = {
    f"{COMMIT}/guaranteed-no-evict": GUARANTEED_NO_EVICT,
    f"{COMMIT}/max-requests": MAX_REQUESTS,
    f"{COMMIT}/max-utilization": MAX_UTILIZATION,
}


def capacity_of(engine_version: Optional[str]) -> str:
    """The capacity policy of a deployment; the default's without one."""
    return DEPLOYMENTS[engine_version or f"{COMMIT}/max-utilization"]


def deployment_of(capacity: str) -> str:
    """The engine_version that names ``capacity``."""
    return next(version for version, policy in DEPLOYMENTS.items() if policy == capacity)
