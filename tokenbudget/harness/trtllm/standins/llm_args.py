"""``tensorrt_llm.llmapi.llm_args.CapacitySchedulerPolicy`` (llmapi/llm_args.py, a StrEnum mirroring
the C++ executor::CapacitySchedulerPolicy): the three policies PyCapacityScheduler dispatches on
(scheduler.py:1929-1940)."""
from .strenum import StrEnum


class CapacitySchedulerPolicy(StrEnum):
    MAX_UTILIZATION = "MAX_UTILIZATION"
    GUARANTEED_NO_EVICT = "GUARANTEED_NO_EVICT"
    STATIC_BATCH = "STATIC_BATCH"
