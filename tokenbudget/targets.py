"""The names of what executes a trace's ops: the reference model, the model with the torch
runner executing its steps, and vLLM's, FastDeploy's and TensorRT-LLM's real schedulers; the real
engines conformance drives."""
MODEL, RUNNER, VLLM, SGLANG, FASTDEPLOY, TRTLLM = "model", "runner", "vllm", "sglang", "fastdeploy", "trtllm"
TARGETS = (MODEL, RUNNER, VLLM, FASTDEPLOY, TRTLLM)
ENGINES = (VLLM, SGLANG, FASTDEPLOY, TRTLLM)
