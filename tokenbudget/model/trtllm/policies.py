"""TensorRT-LLM's budget policies: the micro-batch scheduler's ``max_num_tokens`` as the
code stands after PR #16101, and as it stood before it for one-model speculation."""
from __future__ import annotations

from typing import Any

from ..config import Requirement
from ...spec.intlike import BoolLike, IntLike, ite, not_, or_
from ..policy import BudgetParams, BudgetPolicy, Budgets, plain  # noqa: F401 (plain: the PEP 316 contracts)
from .deployments import COMMIT, DEPLOYMENTS, MAX_REQUESTS, capacity_of
from .loop import TrtllmLoop


class _TrtllmPolicy(BudgetPolicy):
    """Shared: the scope of the model, the startup checks, the loop and the arithmetic."""

    engine = "tensorrt-llm"
    table = "trtllm"
    loop = TrtllmLoop
    commit = COMMIT  # the scheduler.py whose rules the loop follows: the Python port of the C++ pair (PR #10273)
    versions = tuple(DEPLOYMENTS)  # its capacity policies (``deployments``), the default last
    stamps_one_model = True  # PyExecutor attaches k placeholder drafts to one-model generation requests too

    def shared_requirements(self, c: Any) -> list[Requirement]:
        """Every engine's, and (scope) a pool that holds one sequence at the KV manager's max_seq_len, every
        seat's under MAX_REQUESTS, which schedules without asking the KV manager."""
        k = c.num_speculative_tokens
        seq = c.max_model_len + k + (self.lookahead(c) if c.method is not None else 0)
        seats = c.max_num_seqs if capacity_of(getattr(c, "engine_version", None)) == MAX_REQUESTS else 1
        return super().shared_requirements(c) + [Requirement(
            c.num_kv_blocks * c.block_size >= seats * seq,
            lambda: f"{self.name} models pools that hold {'every seat' if seats > 1 else 'one sequence'} at the KV "
            f"manager's max_seq_len, max_model_len + k + L ({seq}; py_executor_creator.py adds the drafts and "
            f"num_extra_kv_tokens){' under MAX_REQUESTS, which schedules without the KV manager' if seats > 1 else ''}"
            f": with less the KV manager runs out; raise num_kv_blocks (now {c.num_kv_blocks} x {c.block_size}) or "
            "lower max_model_len",
            scope=True,
        )]

    def requirements(self, p: BudgetParams) -> list[Requirement]:
        b, s, k, max_len = p.max_num_batched_tokens, p.max_num_seqs, p.num_speculative_tokens, p.max_model_len
        return super().requirements(p) + [
            Requirement(
                not_(p.priority_scheduling),
                lambda: f"{self.name} models TensorRT-LLM, whose capacity scheduler serves requests in arrival "
                "order; set scheduling_policy=fcfs",
                scope=True,
            ),
            Requirement(
                not_(p.parallel_drafting),
                lambda: f"{self.name} models TensorRT-LLM, which has no parallel drafting; set parallel_drafting=false",
                scope=True,
            ),
            Requirement(
                p.max_num_scheduled_tokens is None,
                lambda: f"{self.name} models TensorRT-LLM, whose one token budget is max_num_tokens "
                "(max_num_batched_tokens); leave max_num_scheduled_tokens unset",
                scope=True,
            ),
            Requirement(
                b >= s * (1 + k),
                lambda: f"{self.name} models configs where every generation request fits one step: "
                f"max_num_batched_tokens ({b}) must be >= max_num_seqs * (1 + num_speculative_tokens) "
                f"({s} * {1 + k}); raise max_num_batched_tokens or lower max_num_seqs",
                scope=True,
            ),
            Requirement(
                b >= p.block_size,
                lambda: f"{self.name} models configs where a context chunk can always run: TensorRT-LLM aligns a "
                f"trimmed chunk down to the block (scheduler.py:1249-1251 at 002f3cc3) and never schedules a chunk "
                f"of 0 (1057), so a context longer than max_num_batched_tokens stalls there; max_num_batched_tokens "
                f"({b}) must be >= block_size ({p.block_size}); raise max_num_batched_tokens or lower block_size",
                scope=True,
            ),
            Requirement(
                or_(p.chunked_prefill_knob, b >= max_len - 1),
                lambda: f"without chunked prefill a whole prompt must fit max_num_tokens: max_num_batched_tokens "
                f"({b}) must be >= max_model_len - 1 ({max_len - 1}); raise max_num_batched_tokens, lower "
                "max_model_len or set enable_chunked_prefill=true",
            ),
        ]

    def token_cap(self, p: BudgetParams) -> IntLike:
        return p.max_num_batched_tokens

    def scheduled_drafts(self, p: BudgetParams) -> IntLike:
        """D: the drafts a generation request carries when the micro-batch scheduler charges it."""
        return ite(p.spec_enabled, p.num_speculative_tokens, 0)

    def initial_budgets(self, p: BudgetParams, num_decoding: IntLike) -> Budgets:
        """``max_num_tokens`` whole: a generation request's drafts are charged at its visit.

        pre: plain(p.max_num_batched_tokens, p.max_num_seqs, p.num_speculative_tokens, num_decoding)
        pre: 0 <= num_decoding <= p.max_num_seqs
        pre: p.max_num_batched_tokens >= p.max_num_seqs * (1 + p.num_speculative_tokens)
        post: __return__.token >= num_decoding
        """
        return Budgets(p.max_num_batched_tokens, None)

    def charge(self, p: BudgetParams, grant: IntLike, is_decode: BoolLike) -> Budgets:
        """A context chunk its tokens; a generation request ``beam_width + num_draft_tokens``, 1 + D
        (scheduler.py:1009 at 002f3cc3), so a request paused before the micro-batch ran was never charged.

        pre: plain(grant, p.draft_slots, p.decode_rows, p.block_size) and grant >= 1 and p.draft_slots >= 0
        pre: p.block_size >= 1
        pre: isinstance(is_decode, bool) and isinstance(p.spec_enabled, bool) and isinstance(p.one_model, bool)
        pre: p.num_speculative_tokens >= 0
        post: __return__.token >= grant
        """
        return Budgets(grant + ite(is_decode, self.scheduled_drafts(p), 0), None)

    def runner_rows(self, p: BudgetParams, grant: IntLike, is_decode: BoolLike) -> IntLike:
        return ite(is_decode, p.decode_rows, grant)


class Trtllm(_TrtllmPolicy):
    """TensorRT-LLM after PR #16101: every generation request charged ``1 + k``.

    Two-model speculation always attached ``k`` placeholder drafts before scheduling;
    #16101 ("Reserve MTP draft tokens in scheduler for one-model speculative decoding")
    does the same for one-model MTP and Eagle3.
    """

    name = "trtllm"
    description = "max_num_tokens; a generation request charges 1 + k (one- and two-model)"
    version = "PR #16101"


class TrtllmOneModelUnreserved(_TrtllmPolicy):
    """TensorRT-LLM before PR #16101: one-model speculation charged 1 per generation request.

    With no drafter object the placeholder drafts were never attached, so the micro-batch
    scheduler charged ``beam_width + 0`` while the forward ran ``1 + k`` rows; chunked
    prefill then sized the context chunks up to ``max_num_tokens - G`` and the forward's
    assertion ``total_num_tokens <= max_num_tokens`` fired. Two-model speculation is as
    ``trtllm``.
    """

    name = "trtllm-one-model-unreserved"
    description = "before #16101: one-model mtp/eagle3 charge 1 per generation request but run 1 + k rows"
    version = "before PR #16101"
    stamps_one_model = False

    def scheduled_drafts(self, p: BudgetParams) -> IntLike:
        return ite(p.one_model, 0, super().scheduled_drafts(p))
