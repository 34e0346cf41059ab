"""SGLang's budget policies: the decode KV check and retraction of v0.5.23, and of the
spec-v1 code before and after PR #14939 (SPEC.md §10)."""
from __future__ import annotations

from ...spec.intlike import IntLike, cdiv, ite, not_, or_
from ..config import BudgetConfig, ConfigError, Requirement
from ..policy import BudgetParams, BudgetPolicy, Budgets, plain  # noqa: F401 (plain: the PEP 316 contracts)
from ..request import Request
from .loop import SglangLoop


class _SglangPolicy(BudgetPolicy):
    """Shared: the scope, the startup checks, the pass budget and the decode hooks' defaults."""

    engine = "sglang"
    table = "sglang"
    loop = SglangLoop
    trims_rejected = False  # the verify frees the KV of rejected drafts (spec v1)
    aborts_last = True  # retract_decode aborts the last request that does not fit

    def requirements(self, p: BudgetParams) -> list[Requirement]:
        b, s, k, max_len = p.max_num_batched_tokens, p.max_num_seqs, p.num_speculative_tokens, p.max_model_len
        return super().requirements(p) + [
            Requirement(not_(p.priority_scheduling),
                        lambda: f"{self.name} models SGLang's FCFS queue; set scheduling_policy=fcfs", scope=True),
            Requirement(not_(p.parallel_drafting),
                        lambda: f"{self.name} models SGLang's serial drafters; set parallel_drafting=false",
                        scope=True),
            Requirement(p.max_num_scheduled_tokens is None,
                        lambda: f"{self.name} models SGLang's one pass budget, max_prefill_tokens "
                        "(max_num_batched_tokens); leave max_num_scheduled_tokens unset", scope=True),
            Requirement(b >= s * (1 + k),
                        lambda: f"every decode batch's verify rows must fit the runner: max_num_batched_tokens ({b}) "
                        f"must be >= max_num_seqs * (1 + num_speculative_tokens) ({s} * {1 + k}); raise "
                        "max_num_batched_tokens or lower max_num_seqs", scope=True),
            Requirement(b >= p.block_size,
                        lambda: f"a prefill chunk is floored to whole pages: max_num_batched_tokens ({b}) must be >= "
                        f"block_size ({p.block_size}), or no prompt is ever admitted; raise it or lower block_size"),
            Requirement(or_(p.chunked_prefill_knob, b >= cdiv(max_len - 1, p.block_size) * p.block_size),
                        lambda: f"without chunked prefill a whole prompt, ceiled to a page, must fit max_prefill_tokens: "
                        f"max_num_batched_tokens ({b}) must be >= max_model_len - 1 ({max_len - 1}) ceiled to "
                        f"block_size ({p.block_size}); raise it, lower max_model_len or set enable_chunked_prefill=true"),
        ]

    def validate(self, cfg: BudgetConfig) -> None:
        """As BudgetPolicy, and a pool that holds one request of max_model_len and its
        decode reservation (so a violation is never a lone request that cannot fit)."""
        super().validate(cfg)
        need = self.min_pool_tokens(cfg)
        if cfg.num_kv_blocks * cfg.block_size < need:
            raise ConfigError(f"the KV pool ({cfg.num_kv_blocks} pages of {cfg.block_size}) must hold one request "
                              f"of max_model_len and its decode reservation, {need} tokens; raise num_kv_blocks")

    def min_pool_tokens(self, cfg: BudgetConfig) -> int:
        """The least pool (tokens) validate accepts: a lone request of max_model_len and its
        reservation, with two pages of slack."""
        return cfg.max_model_len + self.reserve(1 + cfg.num_speculative_tokens) + 2 * cfg.block_size

    def token_cap(self, p: BudgetParams) -> IntLike:
        return p.max_num_batched_tokens

    def initial_budgets(self, p: BudgetParams, num_decoding: IntLike) -> Budgets:
        return Budgets(p.max_num_batched_tokens, None)

    def charge(self, p: BudgetParams, grant: IntLike, is_decode: object) -> Budgets:
        """A decode's verify rows; a prefill's extend ceiled to a page.

        post: __return__.token >= grant and __return__.input is None
        """
        return Budgets(ite(is_decode, grant, cdiv(grant, p.block_size) * p.block_size), None)

    def runner_rows(self, p: BudgetParams, grant: IntLike, is_decode: object) -> IntLike:
        return grant

    # -- the decode half (ints) --------------------------------------------------------
    def reserve(self, a: int) -> int:
        """KV past the committed length a decode reserves."""
        return a

    def decode_target(self, loop: SglangLoop, req: Request) -> int:
        """The KV length a decode holds after its reservation."""
        return max(loop.allocated(req), req.num_computed_tokens + self.reserve(loop.alloc_per_decode))

    def decode_need(self, loop: SglangLoop, reqs: list[Request]) -> int:
        """What the reservations of ``reqs`` take from the pool, page-rounded."""
        page = loop.page
        return sum(cdiv(self.decode_target(loop, r), page) * page - loop.allocated(r) for r in reqs)

    def decode_fits(self, loop: SglangLoop, reqs: list[Request], retracting: bool) -> bool:
        """``check_decode_mem``: the pool, the radix cache's evictable KV included, can take the batch's decode."""
        return loop.available() >= self.decode_need(loop, reqs)

    def retraction_order(self, batch: list[Request]) -> list[Request]:
        """Most preferred to keep first; ``retract_decode`` pops the last."""
        return sorted(batch, key=lambda r: (r.num_output_tokens, -r.num_prompt_tokens), reverse=True)


class Sglang(_SglangPolicy):
    """SGLang 0.5.23: the check is the reservation itself."""

    name = "sglang-0.5.23"
    description = "v0.5.23: decode check = per-request reservation to committed + 2A; retraction loops on it"
    version = "0.5.23"

    def reserve(self, a: int) -> int:
        return 2 * a


class SglangV1Retract(_SglangPolicy):
    """Spec v1 before PR #14939 (schedule_batch.py / scheduler.py at 01e3b3f3a3^)."""

    name = "sglang-v1-retract"
    description = "before #14939: the retraction loop checks 1 token a request, the verify allocates 1 + k"
    version = "before PR #14939"
    trims_rejected = True
    aborts_last = False
    retract_multiplier_fixed = False

    def multiplier(self, loop: SglangLoop) -> int:
        """M = num_draft_tokens + topk * steps = (1 + k) + k."""
        return 1 + 2 * loop.k

    def pages_next_decode(self, loop: SglangLoop, reqs: list[Request]) -> int:
        """``new_page_count_next_decode``: a page a request at page size 1; with pages, the
        requests whose next ``thresh`` tokens may cross a page (after #14180)."""
        if loop.page == 1:
            return len(reqs)
        thresh = self.multiplier(loop)
        return sum(1 for r in reqs if (r.num_tokens + thresh) % loop.page <= thresh)

    def decode_fits(self, loop: SglangLoop, reqs: list[Request], retracting: bool) -> bool:
        m = self.multiplier(loop) if (not retracting or self.retract_multiplier_fixed) else 1
        return loop.available() >= self.pages_next_decode(loop, reqs) * m * loop.page

    def retraction_order(self, batch: list[Request]) -> list[Request]:
        return list(batch)


class SglangV1RetractFixed(SglangV1Retract):
    """Spec v1 with PR #14939 (01e3b3f3a3): ``retract_decode`` takes the scheduler's
    ``decode_mem_cache_buf_multiplier`` and loops on the same check as the first one."""

    name = "sglang-v1-retract-fixed"
    description = "#14939: the retraction loop checks M = 1 + 2k tokens a request, as the first check"
    version = "PR #14939"
    retract_multiplier_fixed = True


class SglangV1PageBoundary(SglangV1Retract):
    """Spec v1 before PR #14180 (de153cf76a^; the retraction multiplier of #14942 too): with pages,
    ``new_page_count_next_decode`` counted only the requests exactly at a page boundary,
    ``(seqlen - 1) % page_size == 0``, although a verify of A = 1 + k tokens crosses into a
    new page from any of the last A slots of a page."""

    name = "sglang-v1-page-boundary"
    description = "before #14180: with page_size > 1 only requests exactly at a page boundary count"
    version = "before PR #14180"

    def pages_next_decode(self, loop: SglangLoop, reqs: list[Request]) -> int:
        if loop.page == 1:
            return len(reqs)
        return sum(1 for r in reqs if (r.num_tokens - 1) % loop.page == 0)
