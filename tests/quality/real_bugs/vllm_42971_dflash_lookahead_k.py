"""vLLM before PR #42971: DFlash reserved a lookahead of k KV slots instead of k + 1.

The DFlash drafter runs the new last token and k mask tokens in one query, writing KV
at k + 1 positions past the verified tokens; the scheduler reserved k of them. ``Fixed``
is the same policy reserving k + 1.
"""
from tokenbudget.model.vllm.policies import VllmAdaptive


class Policy(VllmAdaptive):
    name = "vllm-42971-dflash-lookahead-k"

    def lookahead(self, cfg):
        return cfg.num_speculative_tokens if cfg.method == "dflash" else super().lookahead(cfg)


class Fixed(Policy):
    name = "vllm-42971-dflash-lookahead-k-plus-1"

    def lookahead(self, cfg):
        return cfg.num_speculative_tokens + 1 if cfg.method == "dflash" else super().lookahead(cfg)
