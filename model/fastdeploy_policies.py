"""FastDeploy's budget policies, from before PR #7438 to PR #7623.

All run FastDeploy's pass (``fastdeploy_loop.FastDeployLoop``: ``ResourceManagerV1.schedule``,
fastdeploy/engine/sched/resource_manager_v1.py) with one ``token_budget`` starting near
``max_num_batched_tokens`` (B). A decoding request is granted 1 token but the worker
runs it every step with ``1 + k`` rows (``decode_rows`` of the method table), whether or
not the scheduler visited it. Preemption never refunds the budget.

Shared simplifications (listed in SPEC.md): the vLLM-style paged KV pool and prefix
cache of the reference scheduler replace FastDeploy's block reservation heuristics
(64-token blocks, 2-block decode preallocation, output-block reserve); NGRAM decodes
run their worst case, ``1 + k`` rows; FCFS only; k limited to FastDeploy's 1-5.
"""
from __future__ import annotations

from dataclasses import replace

from .config import BudgetConfig, Requirement
from ..spec.intlike import BoolLike, IntLike, ite, max_, min_, not_
from .fastdeploy_loop import FastDeployLoop
from .policy import BudgetParams, BudgetPolicy, Budgets, plain  # noqa: F401 (plain: the PEP 316 contracts)


class _FastDeployPolicy(BudgetPolicy):
    """Shared checks of ``FDConfig.check`` (fastdeploy/config.py) and the loop shape."""

    engine = "fastdeploy"
    table = "fastdeploy"
    loop = FastDeployLoop
    refunds = False
    max_seqs = 512
    max_k = 5

    def requirements(self, p: BudgetParams) -> list[Requirement]:
        b, s, k, max_len, block = (p.max_num_batched_tokens, p.max_num_seqs, p.num_speculative_tokens,
                                   p.max_model_len, p.block_size)
        return super().requirements(p) + [
            Requirement(
                not_(p.priority_scheduling),
                lambda: f"{self.name} models FastDeploy, which schedules FCFS only; set scheduling_policy=fcfs",
                scope=True,
            ),
            Requirement(
                not_(p.parallel_drafting),
                lambda: f"{self.name} models FastDeploy, which has no parallel drafting; set parallel_drafting=false",
                scope=True,
            ),
            Requirement(
                k <= self.max_k,
                lambda: f"FastDeploy accepts num_speculative_tokens 1-{self.max_k}, got {k}; lower "
                "num_speculative_tokens",
                scope=True,
            ),
            Requirement(s <= self.max_seqs, lambda: f"FastDeploy accepts max_num_seqs <= {self.max_seqs}; lower max_num_seqs",
                        scope=True),
            Requirement(
                b >= s,
                lambda: f"max_num_batched_tokens ({b}) must be >= max_num_seqs ({s}); raise max_num_batched_tokens "
                "or lower max_num_seqs",
            ),
            Requirement(
                b <= max_len * s,
                lambda: f"max_num_batched_tokens ({b}) must be <= max_model_len * max_num_seqs ({max_len * s}); lower "
                "max_num_batched_tokens",
            ),
            Requirement(
                b >= block,
                lambda: f"max_num_batched_tokens ({b}) must be >= block_size ({block}) with chunked prefill; raise "
                "max_num_batched_tokens",
            ),
            Requirement(
                p.max_num_scheduled_tokens is None,
                lambda: f"{self.name} models FastDeploy, which has no max_num_scheduled_tokens; leave it unset",
                scope=True,
            ),
        ]

    def params(self, cfg: BudgetConfig) -> BudgetParams:
        """As configured, but always chunking: the V1 KV-cache scheduler has no unchunked path
        (``_get_num_new_tokens`` grants min(tokens left, token budget) whatever
        ``enable_chunked_prefill`` says), so the knob is ignored as FastDeploy ignores it."""
        return replace(super().params(cfg), enable_chunked_prefill=True)

    def token_cap(self, p: BudgetParams) -> IntLike:
        return p.max_num_batched_tokens

    def runner_rows(self, p: BudgetParams, grant: IntLike, is_decode: BoolLike) -> IntLike:
        return ite(is_decode, p.decode_rows, grant)

    def tokens_per_seq(self, p: BudgetParams) -> IntLike:
        """The per-sequence reservation of #7438 and #7499: k + 1 with speculation, else 1."""
        return ite(p.spec_enabled, p.num_speculative_tokens + 1, 1)


class FastDeployV0(_FastDeployPolicy):
    """FastDeploy before PR #7438: no reservation for drafts.

    The budget starts at B; every visited decode charges 1 and a prefill chunk its
    size. A decode really runs ``1 + k`` rows, so a full prefill batch plus decodes
    exceeds B rows: the OOM of the FastDeploy report.
    """

    name = "fastdeploy-v0"
    description = "no reservation; a decode is charged 1 but runs k+1 rows"
    version = "before #7438"

    def initial_budgets(self, p: BudgetParams, num_decoding: IntLike) -> Budgets:
        return Budgets(p.max_num_batched_tokens, None)


class FastDeployReserve(_FastDeployPolicy):
    """FastDeploy PR #7438 as merged: reserve ``S * (k + 1)`` rows for decodes up front.

    ``token_budget = max(B - S * (k + 1), min(B, 512))``; decodes still charge 1 each.
    The 512 floor ("temporary solution to avoid negative token_budget") can hand out
    more than was reserved when ``S * (k + 1)`` approaches B.
    """

    name = "fastdeploy-reserve"
    description = "T = max(B - S*(k+1), min(B, 512))"
    version = "PR #7438"

    def initial_budgets(self, p: BudgetParams, num_decoding: IntLike) -> Budgets:
        """Never more than B: the reservation only ever lowers the budget.

        pre: plain(p.max_num_batched_tokens, p.max_num_seqs, p.num_speculative_tokens) and p.max_num_batched_tokens >= 1
        pre: isinstance(p.spec_enabled, bool) and p.max_num_seqs >= 1 and p.num_speculative_tokens >= 0
        post: 0 < __return__.token <= p.max_num_batched_tokens
        """
        reserved = p.max_num_batched_tokens - p.max_num_seqs * self.tokens_per_seq(p)
        return Budgets(max_(reserved, min_(p.max_num_batched_tokens, 512)), None)


class FastDeployReserveCherrypick(_FastDeployPolicy):
    """FastDeploy PRs #7439/#7440 (release cherry-picks of #7438), precedence bug included.

    Written inline as ``B - S * (k + 1) if speculative else 1``, which Python parses as
    ``(B - S * (k + 1)) if speculative else 1``: without speculation the budget is 1,
    lifted to ``min(B, 512)`` by the floor. With speculation it equals #7438.
    """

    name = "fastdeploy-reserve-cherrypick"
    description = "the same, written `B - S*(k+1) if spec else 1` with Python's precedence"
    version = "PRs #7439/#7440"

    def initial_budgets(self, p: BudgetParams, num_decoding: IntLike) -> Budgets:
        budget = ite(p.spec_enabled, p.max_num_batched_tokens - p.max_num_seqs * (p.num_speculative_tokens + 1), 1)
        return Budgets(max_(budget, min_(p.max_num_batched_tokens, 512)), None)


class FastDeployDecodeCount(_FastDeployPolicy):
    """FastDeploy PR #7499: reserve ``k + 1`` rows per request already decoding.

    ``token_budget = B - D0 * (k + 1)`` with D0 the running requests past prefill,
    counted before the loop; decodes charge nothing; no floor. ``FDConfig.check`` now
    asks ``B >= S * (k + 1)`` with speculation.
    """

    name = "fastdeploy-decode-count"
    description = "T = B - D0*(k+1), D0 = running requests past prefill; decodes charge nothing"
    version = "PR #7499"

    def requirements(self, p: BudgetParams) -> list[Requirement]:
        b, s, per_seq = p.max_num_batched_tokens, p.max_num_seqs, self.tokens_per_seq(p)
        return super().requirements(p) + [
            Requirement(
                b >= s * per_seq,
                lambda: f"max_num_batched_tokens ({b}) must be >= max_num_seqs * tokens_per_seq ({s} * {per_seq}); "
                "raise max_num_batched_tokens or lower max_num_seqs",
            ),
        ]

    def initial_budgets(self, p: BudgetParams, num_decoding: IntLike) -> Budgets:
        """Never negative for a config the startup check accepts.

        pre: plain(p.max_num_batched_tokens, p.max_num_seqs, p.num_speculative_tokens, num_decoding)
        pre: isinstance(p.spec_enabled, bool) and isinstance(p.is_mtp, bool) and p.num_speculative_tokens >= 0
        pre: 0 <= num_decoding <= p.max_num_seqs and p.max_num_batched_tokens >= p.max_num_seqs * self.tokens_per_seq(p)
        post: __return__.token >= 0
        """
        return Budgets(p.max_num_batched_tokens - num_decoding * self.tokens_per_seq(p), None)

    def charge(self, p: BudgetParams, grant: IntLike, is_decode: BoolLike) -> Budgets:
        return Budgets(ite(is_decode, 0, grant), None)


class FastDeployMtpOnly(FastDeployDecodeCount):
    """FastDeploy PR #7623: as #7499, but ``k + 1`` per decode only for method mtp.

    Motivated by NGRAM deployments that failed the #7499 startup check. Every other
    method reserves 1 row per decode, although its decodes still run up to ``1 + k``.
    Modelled from the PR description; the code was not available to read.
    """

    name = "fastdeploy-mtp-only"
    description = "as #7499, but k+1 rows per decode only for method mtp, else 1"
    version = "PR #7623"

    def tokens_per_seq(self, p: BudgetParams) -> IntLike:
        return ite(p.is_mtp, p.num_speculative_tokens + 1, 1)
