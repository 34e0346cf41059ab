"""TensorRT-LLM's Python schedulers (scheduler.py: PyCapacityScheduler, PyMicroBatchScheduler) as a target."""
