"""vLLM before PR #16370: no lookahead KV for the EAGLE head's drafts.

``num_lookahead_tokens`` was 0 for EAGLE, so the scheduler allocated a decode's verify
tokens only, while the EAGLE head writes the KV of its k drafts past them. ``Fixed`` is
the same policy reserving the k slots the merged fix reserves.
"""
from tokenbudget.model.vllm.policies import VllmAdaptive


class Policy(VllmAdaptive):
    name = "vllm-16370-eagle-no-lookahead"

    def lookahead(self, cfg):
        return 0 if cfg.method == "eagle3" else super().lookahead(cfg)


class Fixed(Policy):
    name = "vllm-16370-eagle-lookahead-k"

    def lookahead(self, cfg):
        return cfg.num_speculative_tokens if cfg.method == "eagle3" else super().lookahead(cfg)
