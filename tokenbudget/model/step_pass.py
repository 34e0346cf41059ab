"""StepPass: the bookkeeping of one scheduling pass — budgets, ledger and what was granted."""
from __future__ import annotations

from dataclasses import dataclass, field

from ..spec.records import LedgerEntry
from .physical_need import PhysicalNeed
from .policy import BudgetParams, BudgetPolicy, Budgets
from .request import Request


@dataclass
class StepPass:
    """Spends a policy's budgets on grants and takes them back on same-step preemption.

    Every movement is written to the ledger with both budgets before and after, so the
    spec can check the accounting without trusting the policy. ``rows`` are the runner rows
    a grant physically occupies (``need``), whatever the policy charged for it.
    """

    policy: BudgetPolicy
    params: BudgetParams
    budgets: Budgets
    need: PhysicalNeed
    ledger: list[LedgerEntry] = field(default_factory=list)
    grants: dict[str, int] = field(default_factory=dict)
    drafts: dict[str, int] = field(default_factory=dict)
    rows: dict[str, int] = field(default_factory=dict)
    computed_before: dict[str, int] = field(default_factory=dict)
    num_tokens: dict[str, int] = field(default_factory=dict)
    charged_as_decode: dict[str, bool] = field(default_factory=dict)
    padded: set[str] = field(default_factory=set)
    prefill: set[str] = field(default_factory=set)
    preempted: list[str] = field(default_factory=list)
    paused: list[str] = field(default_factory=list)  # running decodes that run 0 rows this step
    scheduled_running: list[Request] = field(default_factory=list)
    prefill_scheduled: bool = False  # a running request's prefill chunk was scheduled

    def may_schedule(self) -> bool:
        return bool(self.policy.may_schedule(self.params, self.budgets))

    def grant_for(self, demand: int) -> int:
        return self.policy.grant(self.params, demand, self.budgets)

    def record_grant(self, req: Request, grant: int, num_drafts: int, padded: bool, drafts_charged: int = 0) -> None:
        """Charge ``grant`` tokens to req (computed tokens not yet advanced), and ``drafts_charged`` to the
        token budget where an engine charges a prefill the drafts it carries."""
        rid, computed, num_tokens = req.request_id, req.num_computed_tokens, req.num_tokens
        is_decode = req.is_decoding
        policy, params, before = self.policy, self.params, self.budgets
        charge = policy.charge(params, grant, is_decode)
        if drafts_charged:
            charge = Budgets(charge.token + drafts_charged, charge.input)
        after = self.budgets = policy.spend(before, charge, -1)
        self.ledger.append(LedgerEntry("grant", rid, grant, before.token, after.token, before.input, after.input))
        self.grants[rid] = grant
        self.drafts[rid] = num_drafts
        self.rows[rid] = int(self.need.runner_rows(grant, is_decode))
        self.computed_before[rid] = computed
        self.num_tokens[rid] = num_tokens
        self.charged_as_decode[rid] = is_decode
        if padded:
            self.padded.add(rid)
        if not is_decode and computed < num_tokens - 1:
            self.prefill.add(rid)

    def record_refund(self, req: Request, unschedule: bool = True) -> None:
        """Take back the grant of req, preempted in the same pass that scheduled it: the
        budgets, and (``unschedule``) its place among the step's scheduled requests."""
        rid = req.request_id
        grant = self.grants[rid]
        before = self.budgets
        refund = self.policy.refund(self.params, grant, self.charged_as_decode[rid])
        after = self.budgets = self.policy.spend(before, refund, +1)
        self.ledger.append(LedgerEntry("refund", rid, grant, before.token, after.token, before.input, after.input))
        if not unschedule:
            return
        for table in (self.grants, self.charged_as_decode, self.drafts, self.rows, self.computed_before,
                      self.num_tokens):
            del table[rid]
        self.padded.discard(rid)
        self.prefill.discard(rid)
