"""The names of what executes a trace's ops: the reference model, the model with the torch
runner executing its steps, and vLLM's real scheduler."""
MODEL, RUNNER, VLLM = "model", "runner", "vllm"
TARGETS = (MODEL, RUNNER, VLLM)
