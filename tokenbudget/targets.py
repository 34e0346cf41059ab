"""The names of what executes a trace's ops: the reference model, the model with the torch
runner executing its steps, and vLLM's and FastDeploy's real schedulers; the real engines
conformance drives."""
MODEL, RUNNER, VLLM, SGLANG, FASTDEPLOY = "model", "runner", "vllm", "sglang", "fastdeploy"
TARGETS = (MODEL, RUNNER, VLLM, FASTDEPLOY)
ENGINES = (VLLM, SGLANG, FASTDEPLOY)
