"""Planted bugs: small patches to a correct policy or to its loop that the tools must catch.

Each ``PlantedBug`` names a bug, says in one line what it breaks, and applies it with a
``pytest.MonkeyPatch`` (never by editing the model). ``caught_by`` maps a tool to the
failure kinds (invariant ids, or ``model-error`` for an exception inside the model)
through which that tool is expected to catch the bug; ``tests/quality/test_planted_bugs.py``
checks both: ``fuzz`` (the kinds a fuzz run fails with) and ``proof`` (the obligations
``tokenbudget prove`` refutes although the manifest records them proved for the correct
policy). A bug without a ``proof`` entry lies where the prover does not look (the
loop's ledger, KV pool and queues) or breaks an obligation the correct policy
already refutes, so no verdict can flip.

``configs`` narrows the fuzzer to the policy's configs that are free of the findings the
correct policy already shows (SPEC.md §6), so that a catch is the planted bug's own.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Mapping

import pytest

from tokenbudget.model import BudgetConfig, BudgetPolicy, Budgets
from tokenbudget.model import decisions, loop, one_pass_loop, step_pass
from tokenbudget.model.vllm import policies as vllm_policies
from tokenbudget.spec.intlike import and_, ite, min_
from tokenbudget.model.findings import FINDINGS, findings_of
from tokenbudget.model.request import Request, Status

Patch = Callable[[pytest.MonkeyPatch], None]


def clean(policy: BudgetPolicy, scheduling_policy: str, user_t: bool = True,
          tolerated: tuple[str, ...] = ()) -> Callable[[BudgetConfig], bool]:
    """Configs of one scheduling policy that open none of the findings about the policy's
    engine (``model.findings``, SPEC.md §6) but the ``tolerated`` ones. Without ``user_t``,
    T is the policy's own (vLLM <= 0.27 honoured a user's T as given, even above B - d * S,
    and overran B)."""
    findings = [f for f in findings_of(policy.engine) if f.id not in tolerated]

    def ok(cfg: BudgetConfig) -> bool:
        return (cfg.scheduling_policy == scheduling_policy and not any(f.opens(policy, cfg) for f in findings)
                and (user_t or cfg.max_num_scheduled_tokens is None))
    return ok


@dataclass(frozen=True)
class PlantedBug:
    """A bug to plant: ``patch`` applies it to ``policy`` or its loop. ``scheduling``
    and ``user_t`` pick the clean configs to fuzz (``clean``); under priority the
    self-preemption stall of the correct scheduler (finding F3, which every priority
    config opens) is tolerated and its invariant ignored."""

    name: str
    description: str
    patch: Patch
    caught_by: Mapping[str, frozenset[str]]
    policy: str = "vllm-adaptive"
    scheduling: str = "fcfs"
    user_t: bool = True

    @property
    def tolerated(self) -> tuple[str, ...]:
        return ("F3",) if self.scheduling == "priority" else ()

    def configs(self, policy: BudgetPolicy) -> Callable[[BudgetConfig], bool]:
        return clean(policy, self.scheduling, self.user_t, self.tolerated)

    @property
    def ignored(self) -> frozenset[str]:
        """Failure kinds the correct policy shows on these configs too (not the bug's)."""
        return frozenset(FINDINGS[f].invariant for f in self.tolerated)


# -- the patches --------------------------------------------------------------------------
def _refund_without_draft_slots(mp: pytest.MonkeyPatch) -> None:
    mp.setattr(vllm_policies.VllmAdaptive, "refund", lambda self, p, grant, is_decode: Budgets(grant, grant))


def _refund_twice(mp: pytest.MonkeyPatch) -> None:
    original = step_pass.StepPass.record_refund

    def record_refund(self: step_pass.StepPass, req: Request, **kwargs: bool) -> None:
        grant, decode = self.grants[req.request_id], self.charged_as_decode[req.request_id]
        original(self, req, **kwargs)
        self.budgets = self.policy.spend(self.budgets, self.policy.refund(self.params, grant, decode), +1)

    mp.setattr(step_pass.StepPass, "record_refund", record_refund)


class _NoDraftCharge:
    """A policy whose charge leaves out the draft slots; everything else is the wrapped one's."""

    def __init__(self, inner: BudgetPolicy) -> None:
        self.inner = inner

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def charge(self, p: Any, grant: Any, is_decode: Any) -> Budgets:
        return Budgets(grant, grant)


def _waiting_loop_skips_draft_slots(mp: pytest.MonkeyPatch) -> None:
    original = one_pass_loop.OnePassLoop._schedule_waiting

    def schedule_waiting(self: one_pass_loop.OnePassLoop, step: step_pass.StepPass, threshold: int) -> None:
        charging = step.policy
        step.policy = _NoDraftCharge(charging)  # type: ignore[assignment]
        try:
            original(self, step, threshold)
        finally:
            step.policy = charging

    mp.setattr(one_pass_loop.OnePassLoop, "_schedule_waiting", schedule_waiting)


def _exit_rule(loose: bool) -> Patch:
    def patch(mp: pytest.MonkeyPatch) -> None:
        if loose:  # input_budget >= d instead of > d
            rule = lambda self, p, b: and_(b.token > 0, b.input >= p.draft_slots)  # noqa: E731
        else:  # input_budget > d + 1 instead of > d
            rule = lambda self, p, b: and_(b.token > 0, b.input > p.draft_slots + 1)  # noqa: E731
        mp.setattr(vllm_policies.VllmAdaptive, "may_schedule", rule)
    return patch


def _replace_decision(mp: pytest.MonkeyPatch, name: str, planted: Callable[..., Any]) -> None:
    """Replace a function of ``model.decisions``: the loops and the prover call it through
    the module, so both tools see the planted bug."""
    mp.setattr(decisions, name, planted)


def _grant_before_model_len_clip(mp: pytest.MonkeyPatch) -> None:
    def running_grant(policy: BudgetPolicy, p: Any, budgets: Budgets, demand: Any, computed: Any, threshold: Any,
                      max_model_len: Any, bypass: Any) -> Any:
        wanted = decisions.capped_by_threshold(demand, threshold)
        return ite(bypass, wanted, policy.grant(p, wanted, budgets))  # the clip to max_model_len is gone

    _replace_decision(mp, "running_grant", running_grant)


def _negative_draft_share(mp: pytest.MonkeyPatch) -> None:
    def scheduled_drafts(drafts_in_grant: bool, drafts: Any, computed: Any, grant: Any, num_tokens: Any,
                         is_decode: Any) -> Any:
        if drafts_in_grant:
            return min_(drafts, computed + grant - num_tokens)  # max(0, ...) is gone
        return ite(is_decode, drafts, 0)

    _replace_decision(mp, "scheduled_drafts", scheduled_drafts)


def _static_reservation_s_minus_1(mp: pytest.MonkeyPatch) -> None:
    def token_cap(self: BudgetPolicy, p: Any) -> Any:
        if p.max_num_scheduled_tokens is None:
            return p.max_num_batched_tokens - p.draft_slots * (p.max_num_seqs - 1)
        return p.max_num_scheduled_tokens

    mp.setattr(vllm_policies.VllmStatic, "token_cap", token_cap)


def _block_freed_twice_on_preemption(mp: pytest.MonkeyPatch) -> None:
    original = loop.SchedulerLoop._preempt

    def preempt(self: loop.SchedulerLoop, req: Request) -> None:
        for block in req.block_ids:  # drops its references by hand, then frees them again
            self.pool.ref_count[block] -= 1
        original(self, req)

    mp.setattr(loop.SchedulerLoop, "_preempt", preempt)


def _abort_leaves_request_queued(mp: pytest.MonkeyPatch) -> None:
    def abort_request(self: loop.SchedulerLoop, request_id: str) -> None:
        req = self.requests[request_id]
        if req.is_finished:
            return
        self.pool.free(req)  # the removal from its queue is gone
        req.status = Status.ABORTED

    mp.setattr(loop.SchedulerLoop, "abort_request", abort_request)


FUZZ, PROOF = "fuzz", "proof"

BUGS: tuple[PlantedBug, ...] = (
    PlantedBug("refund-forgets-draft-slots",
               "a same-step preemption gives back grant, not grant + d, to the input budget",
               _refund_without_draft_slots, {FUZZ: frozenset({"exact-refund"}), PROOF: frozenset({"exact-refund"})},
               scheduling="priority"),
    PlantedBug("refund-applied-twice",
               "a same-step preemption credits its refund to the budgets twice (the second time off the ledger)",
               _refund_twice, {FUZZ: frozenset({"exact-refund"})}, scheduling="priority"),
    PlantedBug("waiting-loop-skips-draft-slots",
               "the waiting loop charges the input budget grant, not grant + d",
               _waiting_loop_skips_draft_slots, {FUZZ: frozenset({"input-rows-cap", "input-budget-nonnegative"})}),
    PlantedBug("exit-rule-too-loose",
               "the loops go on while input_budget >= d (off by one: > d), so a request can be granted 0",
               _exit_rule(loose=True), {FUZZ: frozenset({"model-error"}), PROOF: frozenset({"model-error"})}),
    PlantedBug("exit-rule-too-strict",
               "the loops stop once input_budget <= d + 1 (off by one: <= d), so B = d + 1 never schedules",
               _exit_rule(loose=False), {FUZZ: frozenset({"progress"})}),
    PlantedBug("grant-before-model-len-clip",
               "a running request keeps the grant the budgets allow, never clipped to max_model_len - computed - 1",
               _grant_before_model_len_clip, {FUZZ: frozenset({"model-len", "kv-capacity", "model-error"}),
                                             PROOF: frozenset({"model-len"})}),
    PlantedBug("negative-draft-share-not-floored",
               "the drafts riding with a grant, grant - tokens left, are not floored at 0 for a prefill chunk",
               _negative_draft_share, {FUZZ: frozenset({"spec-shape", "model-error"})}),
    PlantedBug("static-reservation-with-s-minus-1",
               "vLLM <= 0.27's reservation computed as T = B - d * (S - 1)",
               _static_reservation_s_minus_1, {FUZZ: frozenset({"input-rows-cap"})}, policy="vllm-static",
               user_t=False),
    PlantedBug("kv-block-freed-twice-on-preemption",
               "preempting a request drops its block references twice",
               _block_freed_twice_on_preemption, {FUZZ: frozenset({"kv-capacity", "model-error"})}),
    PlantedBug("abort-leaves-request-queued",
               "an abort frees the blocks and marks the request aborted but leaves it in its queue",
               _abort_leaves_request_queued, {FUZZ: frozenset({"no-request-lost", "model-error"})}),
)

