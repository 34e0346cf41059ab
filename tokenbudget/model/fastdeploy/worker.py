"""What FastDeploy's worker and token processor decide that its scheduler does not: which
decodes run, and what a step's output leaves behind. One rule set, shared by the model's
FastDeploy loop (``fastdeploy_loop``) and the harness that drives FastDeploy's real
``ResourceManagerV1`` (``tokenbudget/harness/fastdeploy/engine.py``)."""
from __future__ import annotations


def pause_block(written: int, k: int, block_size: int) -> int:
    """The block index whose absence pauses a decode with ``written`` KV tokens and k drafts."""
    return (written + 2 * k + 2) // block_size


def decode_pauses(written: int, held_blocks: int, k: int, block_size: int, max_model_len: int) -> bool:
    """Whether the worker pauses a decode holding ``held_blocks`` blocks after a step."""
    index = pause_block(written, k, block_size)
    return held_blocks <= index < max_model_len // block_size


def tokens_kept(accepted: int, k: int, output_tokens: int, max_tokens: int, num_tokens: int,
                max_model_len: int) -> int:
    """Tokens a decode's step appends: one and its accepted drafts, up to the stops."""
    return max(0, min(1 + min(max(0, accepted), k), max_tokens - output_tokens, max_model_len - num_tokens))


def finished(output_tokens: int, max_tokens: int, num_tokens: int, max_model_len: int) -> bool:
    """The token processor's stop: ``max_tokens`` output tokens or ``max_model_len`` tokens."""
    return output_tokens >= max_tokens or num_tokens >= max_model_len
