"""The names of the targets a trace runs on."""
MODEL, RUNNER, VLLM = "model", "runner", "vllm"
TARGETS = (MODEL, RUNNER, VLLM)
