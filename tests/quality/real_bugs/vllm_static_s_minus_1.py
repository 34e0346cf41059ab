"""vLLM <= 0.27's up-front reservation computed for S - 1 sequences, T = B - d * (S - 1):
a full batch runs d rows past B."""
from tokenbudget.model.vllm.policies import VllmStatic


class Policy(VllmStatic):
    name = "vllm-static-s-minus-1"

    def token_cap(self, p):
        if p.max_num_scheduled_tokens is None:
            return p.max_num_batched_tokens - p.draft_slots * (p.max_num_seqs - 1)
        return p.max_num_scheduled_tokens
