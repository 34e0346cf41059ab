"""vLLM's budget policies: the adaptive per-request accounting (>= 0.28) and the old
worst-case reservation (<= 0.27)."""
from __future__ import annotations

from ..config import BudgetConfig, Requirement
from ...spec.intlike import BoolLike, IntLike, and_, min_, or_
from ..policy import BudgetParams, BudgetPolicy, Budgets, plain  # noqa: F401 (plain: the PEP 316 contracts)
from .loop import VllmLoop
from .versions import MODELLED, VLLM_VERSIONS, VllmVersion


class _VllmPolicy(BudgetPolicy):
    """Shared by both vLLM policies: the scheduler-config checks of
    ``SchedulerConfig.verify_max_model_len`` (vllm/config/scheduler.py, 0.32 and 0.33), and
    the version table (``vllm_versions.VLLM_VERSIONS``) that picks the method table and
    the version's rules from ``engine_version``."""

    engine = "vllm"
    table = "vllm-0.32"
    loop = VllmLoop
    versions = MODELLED

    def rules(self, version: str | None) -> VllmVersion:
        """The version table's row for ``version`` (None: the newest this policy models)."""
        return VLLM_VERSIONS[version if version is not None else self.versions[-1]]

    def table_for(self, cfg: BudgetConfig) -> str:
        return self.rules(self.engine_version(cfg)).table

    def requirements(self, p: BudgetParams) -> list[Requirement]:
        b, s, max_len = p.max_num_batched_tokens, p.max_num_seqs, p.max_model_len
        return super().requirements(p) + [
            Requirement(
                or_(p.enable_chunked_prefill, b >= max_len),
                lambda: f"max_num_batched_tokens ({b}) is smaller than max_model_len ({max_len}) with chunked prefill "
                "off; raise max_num_batched_tokens, lower max_model_len or set enable_chunked_prefill=true",
                name="batch-holds-model-len",
            ),
            Requirement(
                b >= s,
                lambda: f"max_num_batched_tokens ({b}) must be >= max_num_seqs ({s}); raise max_num_batched_tokens "
                "or lower max_num_seqs",
                name="batch-holds-seqs",
            ),
        ]


class VllmAdaptive(_VllmPolicy):
    """vLLM >= 0.28 (0.32.0 as reference): draft slots charged per scheduled request."""

    name = "vllm-adaptive"
    description = "T = B; each scheduled request charges grant + d to the input budget; refund grant + d"
    version = "0.32"

    versions = MODELLED
    table = "vllm-0.33"  # the newest version's, which a config without engine_version follows

    def requirements(self, p: BudgetParams) -> list[Requirement]:
        cap, b, d, lookahead = self.token_cap(p), p.max_num_batched_tokens, p.draft_slots, p.lookahead
        reserve = Requirement(
            b > d,
            lambda: f"max_num_batched_tokens ({b}) must exceed the draft slots of one request (d={d}); raise "
            "max_num_batched_tokens or lower num_speculative_tokens",
            name="batch-exceeds-draft-slots",
        )
        if self.rules(p.engine_version).validation_reserves_lookahead:
            reserve = Requirement(
                b > lookahead,
                lambda: f"max_num_batched_tokens ({b}) must exceed the lookahead slots of one request "
                f"(L={lookahead}, vLLM {p.engine_version or self.versions[-1]}); raise max_num_batched_tokens or "
                "lower num_speculative_tokens",
                name="batch-exceeds-draft-slots",
            )
        return super().requirements(p) + [
            Requirement(
                cap > 0,
                lambda: f"max_num_scheduled_tokens is {cap}, which allows no token; raise max_num_scheduled_tokens "
                "(or leave it unset)",
                name="token-cap-positive",
            ),
            reserve,
        ]

    def token_cap(self, p: BudgetParams) -> IntLike:
        if p.max_num_scheduled_tokens is None:
            return p.max_num_batched_tokens
        return p.max_num_scheduled_tokens

    def initial_budgets(self, p: BudgetParams, num_decoding: IntLike) -> Budgets:
        return Budgets(self.token_cap(p), p.max_num_batched_tokens)

    def may_schedule(self, p: BudgetParams, b: Budgets) -> BoolLike:
        return and_(b.token > 0, b.input > p.draft_slots)

    def grant(self, p: BudgetParams, demand: IntLike, b: Budgets) -> IntLike:
        """Leaves room for the request's draft slots: the input budget stays >= 0.

        pre: plain(demand, b.token, b.input, p.draft_slots) and p.draft_slots >= 0 and demand >= 1
        pre: self.may_schedule(p, b)
        post: __return__ + p.draft_slots <= b.input
        """
        return min_(demand, b.token, b.input - p.draft_slots)

    def charge(self, p: BudgetParams, grant: IntLike, is_decode: BoolLike) -> Budgets:
        return Budgets(grant, grant + p.draft_slots)


class VllmStatic(_VllmPolicy):
    """vLLM <= 0.27: draft slots reserved for every possible sequence up front."""

    name = "vllm-static"
    description = "T = B - d*S reserved up front; only the token budget is charged"
    version = "0.27"
    versions = ("0.32",)  # the loop and method table it runs on

    def requirements(self, p: BudgetParams) -> list[Requirement]:
        cap, b, d, s = self.token_cap(p), p.max_num_batched_tokens, p.draft_slots, p.max_num_seqs
        return super().requirements(p) + [
            Requirement(
                cap > 0,
                lambda: f"max_num_scheduled_tokens = max_num_batched_tokens - d * max_num_seqs = {b} - {d} * {s} = "
                f"{cap} allows no token; raise max_num_batched_tokens, lower max_num_seqs or lower "
                "num_speculative_tokens",
            ),
        ]

    def token_cap(self, p: BudgetParams) -> IntLike:
        if p.max_num_scheduled_tokens is None:
            return p.max_num_batched_tokens - p.draft_slots * p.max_num_seqs
        return p.max_num_scheduled_tokens

    def initial_budgets(self, p: BudgetParams, num_decoding: IntLike) -> Budgets:
        """With T derived, the draft slots of every sequence are reserved up front.

        pre: plain(p.max_num_batched_tokens, p.max_num_seqs, p.draft_slots) and p.max_num_scheduled_tokens is None
        post: __return__.token + p.draft_slots * p.max_num_seqs == p.max_num_batched_tokens
        """
        return Budgets(self.token_cap(p), None)
