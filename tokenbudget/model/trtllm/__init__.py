"""TensorRT-LLM's capacity and micro-batch schedulers: its loop, policies and context chunking."""
