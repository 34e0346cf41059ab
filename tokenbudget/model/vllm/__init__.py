"""vLLM's scheduler: its loop, policies, version table and columnar step."""
