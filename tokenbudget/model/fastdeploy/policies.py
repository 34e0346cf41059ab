"""FastDeploy's budget policies, from before PR #7438 to PR #7623, as merged."""
from __future__ import annotations

from dataclasses import replace
from typing import Any, Optional

from ..config import BudgetConfig, ConfigError, Requirement
from ...spec.intlike import BoolLike, IntLike, ite, max_, min_, not_, or_
from .commits import ENC_DEC_BLOCK_NUM
from .loop import FastDeployLoop
from ..policy import BudgetParams, BudgetPolicy, Budgets, plain  # noqa: F401 (plain: the PEP 316 contracts)


ENCODER_BLOCK_SHAPE_Q = 64  # gpu_model_runner.py:1591, :1706, :1707, :1716 at 43685a98a, b19754c5f, 2a606e361, 564c78d78


class _FastDeployPolicy(BudgetPolicy):
    """Shared checks of ``FDConfig.check`` (fastdeploy/config.py) and the loop shape.

    Also the GPU worker's startup assert that ``max_model_len`` is a multiple of
    ``block_size`` (``allocate_launch_related_buffer``, append_attn_backend.py:79, called by
    ``_initialize_attn_backend``, gpu_model_runner.py:241 and :1724 at 2a606e361, the same
    assert at every modelled commit). Without it ``max_block_num_per_seq`` = max_model_len //
    block_size (config.py:2117) would cap a one-chunk prompt's blocks below its tokens
    (``get_new_block_nums``, resource_manager_v1.py:253-263): a config FastDeploy never runs.
    The same backend asserts ``max_model_len % 64 == 0`` (append_attn_backend.py:80), and the
    cache config a pool of at least ``max_model_len // block_size + 2`` blocks (config.py), at
    every modelled commit; SPEC.md §11 cites each."""

    engine = "fastdeploy"
    table = "fastdeploy"
    loop = FastDeployLoop
    refunds = False
    max_seqs = 512
    max_k = 5
    min_model_len = 16
    default_k = 1  # SpeculativeConfig's num_speculative_tokens when no method is set (config.py:763)

    def engine_version(self, cfg: BudgetConfig) -> Optional[str]:
        """The commit cfg names (``fastdeploy_commits``), else None: the paged pool of SPEC.md §5."""
        return getattr(cfg, "engine_version", None)

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
                max_len >= self.min_model_len,
                lambda: f"FastDeploy asks max_model_len >= {self.min_model_len}, got {max_len}; raise max_model_len",
            ),
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
            Requirement(  # _initialize_attn_backend (gpu_model_runner.py:241, :1724) -> append_attn_backend.py:79
                max_len % block == 0,
                lambda: f"FastDeploy's attention backend asserts max_model_len % block_size == 0 at startup, got "
                f"{max_len} and {block}; set max_model_len to a multiple of block_size",
                scope=True,
            ),
            Requirement(
                or_(not_(p.chunked_prefill_knob), b >= block),
                lambda: f"max_num_batched_tokens ({b}) must be >= block_size ({block}) with chunked prefill; raise "
                "max_num_batched_tokens or set enable_chunked_prefill=false",
            ),
            Requirement(
                p.max_num_scheduled_tokens is None,
                lambda: f"{self.name} models FastDeploy, which has no max_num_scheduled_tokens; leave it unset",
                scope=True,
            ),
        ] + self._startup_asserts(p)

    def _startup_asserts(self, p: BudgetParams) -> list[Requirement]:
        """The attention backend's tile assert, for a config that names a commit (the real
        engine's rules); the paged pool of SPEC.md §5 has no backend."""
        if p.engine_version is None:
            return []
        max_len = p.max_model_len
        return [Requirement(  # encoder_block_shape_q = 64 (gpu_model_runner.py:1716) -> append_attn_backend.py:80 (564c78d78)
            max_len % ENCODER_BLOCK_SHAPE_Q == 0,
            lambda: f"FastDeploy's attention backend asserts max_model_len % {ENCODER_BLOCK_SHAPE_Q} == 0 at startup, "
            f"got {max_len}; set max_model_len to a multiple of {ENCODER_BLOCK_SHAPE_Q}",
            scope=True,
        )]

    def shared_requirements(self, c: Any) -> list[Requirement]:
        """As BudgetPolicy, and for a config that names a commit the pool FastDeploy's cache
        config asserts at startup: at least max_model_len // block_size + ENC_DEC_BLOCK_NUM
        blocks (max_model_len is a multiple of the block)."""
        if getattr(c, "engine_version", None) is None:
            return super().shared_requirements(c)
        least = c.max_model_len + ENC_DEC_BLOCK_NUM * c.block_size
        return [*super().shared_requirements(c), Requirement(  # config.py:1706, :1731 (564c78d78)
            c.num_kv_blocks * c.block_size >= least,
            lambda: f"FastDeploy asserts at startup a pool of at least max_model_len // block_size + "
            f"{ENC_DEC_BLOCK_NUM} = {c.max_model_len // c.block_size + ENC_DEC_BLOCK_NUM} blocks, got "
            f"{c.num_kv_blocks}; raise num_kv_blocks or lower max_model_len",
            scope=True, name="fastdeploy-least-pool")]

    def params(self, cfg: BudgetConfig) -> BudgetParams:
        """As configured, but the pass always chunks: the V1 KV-cache scheduler has no unchunked
        path (``_get_num_new_tokens``, resource_manager_v1.py:543-550 at 2a606e361, grants
        min(tokens left, token budget) whatever ``enable_chunked_prefill`` says). The knob
        still reaches validation (``chunked_prefill_knob``), as it reaches ``FDConfig.check``."""
        return replace(super().params(cfg), enable_chunked_prefill=True)

    def token_cap(self, p: BudgetParams) -> IntLike:
        return p.max_num_batched_tokens

    def runner_rows(self, p: BudgetParams, grant: IntLike, is_decode: BoolLike) -> IntLike:
        return ite(is_decode, p.decode_rows, grant)

    def tokens_per_seq(self, p: BudgetParams) -> IntLike:
        """t of #7438 and #7499: ``k + 1 if speculative_config is not None else 1``
        (resource_manager_v1.py at 43685a98a and b19754c5f). The object always exists, so
        without speculation t is the default k + 1 = 2."""
        return ite(p.spec_enabled, p.num_speculative_tokens + 1, self.default_k + 1)


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
    versions = ("43685a98a",)

    def initial_budgets(self, p: BudgetParams, num_decoding: IntLike) -> Budgets:
        """Never more than B: the reservation only ever lowers the budget.

        pre: plain(p.max_num_batched_tokens, p.max_num_seqs, p.num_speculative_tokens) and p.max_num_batched_tokens >= 1
        pre: isinstance(p.spec_enabled, bool) and p.max_num_seqs >= 1 and p.num_speculative_tokens >= 0
        post: 0 < __return__.token <= p.max_num_batched_tokens
        """
        reserved = p.max_num_batched_tokens - p.max_num_seqs * self.tokens_per_seq(p)
        return Budgets(max_(reserved, min_(p.max_num_batched_tokens, 512)), None)


class FastDeployReserveCherrypick(_FastDeployPolicy):
    """A review-thread revision of the #7438 cherry-pick, precedence bug included; never released.

    Written inline as ``B - S * (k + 1) if speculative else 1``, which Python parses as
    ``(B - S * (k + 1)) if speculative else 1``: without speculation the budget is 1,
    lifted to ``min(B, 512)`` by the floor. With speculation it equals #7438. The merged
    cherry-pick #7439 (185708b56) is byte-identical to #7438 (43685a98a: same blob
    ae0e0c798..ffc9c0bac); this policy stays as a known-bad regression target.
    """

    name = "fastdeploy-reserve-cherrypick"
    description = "review-thread revision (never merged): `B - S*(k+1) if spec else 1` with Python's precedence"
    version = "review revision of #7439"

    def initial_budgets(self, p: BudgetParams, num_decoding: IntLike) -> Budgets:
        budget = ite(p.spec_enabled, p.max_num_batched_tokens - p.max_num_seqs * (p.num_speculative_tokens + 1), 1)
        return Budgets(max_(budget, min_(p.max_num_batched_tokens, 512)), None)


class FastDeployDecodeCount(_FastDeployPolicy):
    """FastDeploy PR #7499 as merged (b19754c5f): reserve t rows per request already decoding.

    ``token_budget = B - D0 * t`` with D0 the running requests past prefill, counted before
    the loop (resource_manager_v1.py:799-802); decodes charge nothing (:859); no floor.
    ``FDConfig.check`` asks ``B >= S * t`` (config.py:2294-2303). t = k + 1, and 2 without
    speculation (the config object's default k = 1). With B = S * t and S decodes the
    budget starts at 0 and the loop visits nobody (SPEC.md §6, F5).
    """

    name = "fastdeploy-decode-count"
    description = "T = B - D0*t, t = k+1 (2 without speculation), D0 = running decodes; decodes charge nothing"
    version = "PR #7499"
    versions = ("b19754c5f",)

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


class FastDeploySpecMethod(FastDeployDecodeCount):
    """FastDeploy PR #7623 as merged (2a606e361): as #7499, with t = k + 1 whenever a
    speculative method is set (mtp and ngram alike), else 1.

    ``speculative_config is not None and speculative_config.method is not None``, in the
    budget (resource_manager_v1.py:794-798) and in ``FDConfig.check`` (config.py:2294-2298).
    What it fixed: a deployment without speculation no longer reserves 2 per decode.
    """

    name = "fastdeploy-spec-method"
    description = "as #7499, t = k+1 when a speculative method is set, else 1"
    version = "PR #7623"
    versions = ("2a606e361", "564c78d78")

    def tokens_per_seq(self, p: BudgetParams) -> IntLike:
        return ite(p.spec_enabled, p.num_speculative_tokens + 1, 1)


class FastDeployMtpOnly(FastDeployDecodeCount):
    """The first revision of PR #7623 (never merged): t = k + 1 only for method mtp, else 1.

    The PR's first commit, "only apply speculative tokens for MTP method", was replaced
    before the merge by "use method is not None instead of MTP check" (2a606e361's
    message). Kept as a known-bad regression target: an NGRAM decode still runs up to
    ``1 + k`` rows but reserves 1.
    """

    name = "fastdeploy-mtp-only"
    description = "first revision of #7623 (never merged): t = k+1 only for method mtp, else 1"
    version = "revision of #7623"
    versions = ()

    def tokens_per_seq(self, p: BudgetParams) -> IntLike:
        return ite(p.is_mtp, p.num_speculative_tokens + 1, 1)
