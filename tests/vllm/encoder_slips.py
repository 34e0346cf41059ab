"""One-line slips in vLLM's encoder budget and cut, planted by ``vllm_slips.plant`` into a copy of
vLLM 0.33.0 or 0.34.0 (the fuzzer makes no multimodal request: the monitor catches these,
tests/vllm/test_monitor_encoder.py)."""
from __future__ import annotations

from vllm_slips import SCHEDULER, Slip

ENCODER_CACHE_MANAGER = "vllm/v1/core/encoder_cache_manager.py"

ENCODER_SLIPS: tuple[Slip, ...] = (
    Slip("encoder-budget-off-by-one", "an encoder input fits an encoder budget one embedding short of it",
         ENCODER_CACHE_MANAGER, "if num_embeds > encoder_compute_budget:", "if num_embeds > encoder_compute_budget + 1:",
         at=(("0.33.0", 188), ("0.34.0", 187))),
    Slip("encoder-cut-one-late", "a grant cut before an encoder input it cannot run reaches one token into it",
         SCHEDULER, "num_new_tokens, start_pos - num_computed_tokens",
         "num_new_tokens, start_pos - num_computed_tokens + 1",
         at=(("0.33.0", 2166), ("0.34.0", 2215))),
)
BY_NAME = {s.name: s for s in ENCODER_SLIPS}
