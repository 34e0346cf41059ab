"""The names of what executes a trace's ops: the reference model, the model with the torch
runner executing its steps, and vLLM's real scheduler; the real engines conformance drives."""
MODEL, RUNNER, VLLM, SGLANG = "model", "runner", "vllm", "sglang"
TARGETS = (MODEL, RUNNER, VLLM)
ENGINES = (VLLM, SGLANG)
