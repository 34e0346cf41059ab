"""What a cost model reads of one scheduling step."""
from __future__ import annotations

from dataclasses import dataclass

from ..spec.records import StepRecord

FEATURES = ("prefill_tokens", "verify_tokens", "token_context", "num_seqs", "kv_tokens", "chunk_square", "sampled_seqs",
            "sampling_steps", "pairs_past_cached_keys")
# Keys per request past which attention on the torch runner's CPU costs about twice as much a
# query-key pair (profiled: bench/bench_whatif_steps.py); see pairs_past_cached_keys.
CACHED_KEYS = 1024


@dataclass(frozen=True)
class StepShape:
    """One step's work: prefill tokens, verify tokens (a decode's grant: its sampled row and
    drafts), the sum over requests of each token's context (causal attention's pairs), sequences, the
    drafter's rows (runner rows past the grants), the KV tokens read (each sequence's
    context once), the sum of squared grants (what attention that masks a full
    grant x context rectangle, as the torch runner's does, computes past the causal pairs),
    the sequences that sample a token (decodes and last prefill chunks: the sampler and the
    drafter run for them, not for a prompt's earlier chunks) and the query-key pairs of each
    request past its first ``CACHED_KEYS`` keys (grant x keys beyond them: where a layer's
    keys, values and scores outgrow a CPU core's cache). The features add whether any
    sequence samples (the sampler and the drafter's pass run once a step for all of them, a
    fixed cost that a step of prompt chunks alone does not pay)."""

    prefill_tokens: int
    verify_tokens: int
    token_context: int
    num_seqs: int
    draft_rows: int = 0
    kv_tokens: int = 0
    chunk_square: int = 0
    sampled_seqs: int = 0
    pairs_past_cached_keys: int = 0

    @property
    def tokens(self) -> int:
        return self.prefill_tokens + self.verify_tokens

    def features(self) -> tuple[int, ...]:
        """The inputs of a fitted or tabled cost model, in ``FEATURES`` order."""
        return (self.prefill_tokens, self.verify_tokens, self.token_context, self.num_seqs, self.kv_tokens,
                self.chunk_square, self.sampled_seqs, int(self.sampled_seqs > 0), self.pairs_past_cached_keys)

    @classmethod
    def of(cls, record: StepRecord) -> "StepShape":
        prefill = verify = token_context = kv = square = sampled = past_cached = 0
        before, prefilling = record.computed_before, record.prefill
        for rid, grant in record.num_scheduled_tokens.items():
            token_context += grant * before[rid] + grant * (grant + 1) // 2  # causal: token i sees i earlier ones
            kv += before[rid] + grant
            square += grant * grant
            sampled += before[rid] + grant >= record.num_tokens[rid]
            past_cached += grant * max(0, before[rid] + grant - CACHED_KEYS)
            if rid in prefilling:
                prefill += grant
            else:
                verify += grant
        grants = record.num_scheduled_tokens
        return cls(prefill, verify, token_context, len(grants), record.total_runner_rows - sum(grants.values()), kv,
                   square, sampled, past_cached)
