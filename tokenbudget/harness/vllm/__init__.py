"""vLLM's real scheduler (the installed vllm package) as a target."""
