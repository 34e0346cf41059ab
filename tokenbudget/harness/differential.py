"""Differential: a real engine's target with the reference model stepped beside it."""
from __future__ import annotations

from typing import Mapping

from ..model import BudgetConfig, BudgetPolicy
from ..model.findings import findings_of
from ..model.target import ModelTarget
from ..spec.execution import Execution
from ..spec.invariants import Violation, check_step
from ..spec.records import StepOutcome, StepRecord
from ..spec.target import CONFORMANCE
from ..spec.trace import AbortOp, AddOp, StepExpectation, StepOp
from .lockstep import StepView, view

# The rules a parting names (the mechanism of a ``conformance`` failure: ``fuzz.failures.identity``).
RUNNING_GRANT, WAITING_GRANT = "running-loop grant", "waiting-loop grant"
RUNNING_EXIT, WAITING_EXIT = "running-loop exit", "waiting-loop exit"
REFUND, PREEMPTION, DRAFTS, FINISH = "same-step refund", "preemption", "scheduled drafts", "finish"
KV_IN_USE = "blocks in use"


class Differential:
    """The lockstep half of an engine's target: call ``start_reference`` once the engine's
    target is built; ``add``, ``abort`` and ``step`` go to both sides."""

    cfg: BudgetConfig
    findings_engine: str  # the engine whose findings (``model.findings``) explain a crash
    label: str  # the engine as messages name it

    def start_reference(self, policy: BudgetPolicy) -> None:
        self.reference = Execution(ModelTarget(self.cfg, policy, validate=False))
        self.reference_run = self.reference.run
        self.judged: list[Violation] = []
        self.explained_errors: set[int] = set()
        self.parted = False
        self.expectation: StepExpectation | None = None  # the engine's side of the step where the two parted
        self._running: tuple[str, ...] = ()  # the model's running queue before the pass

    def add(self, op: AddOp) -> None:
        super().add(op)
        if not self.parted:
            self.reference.apply(op)

    def abort(self, request_id: str) -> None:
        super().abort(request_id)
        if not self.parted:
            self.reference.apply(AbortOp(request_id))

    def step(self, accepted: Mapping[str, int]) -> tuple[StepRecord, StepOutcome]:
        record, outcome = super().step(accepted)
        if self.parted:
            return record, outcome
        model = self.reference.apply(StepOp(dict(accepted)))
        assert model is not None
        running, self._running = self._running, tuple(model.running)
        if record.error is not None:
            self.parted = True
            self._explain_crash(record, model)
            return record, outcome
        ours, theirs = view(model, self.reference_run.outcomes[-1]), view(record, outcome)
        fields = ours.differs_in(theirs)
        if fields or model.error is not None:
            self.parted = True
            message = (f"the model raised {model.error} where {self.label} did not" if model.error is not None
                       else parting(model, record, running, fields, ours, theirs, self.label))
            self.judged.append(Violation(CONFORMANCE, record.step, message))
            self.expectation = StepExpectation(record.step, dict(theirs.num_scheduled_tokens),
                                               dict(theirs.scheduled_draft_tokens), theirs.preempted,
                                               theirs.kv_blocks_in_use)
        return record, outcome

    def _explain_crash(self, record: StepRecord, model: StepRecord) -> None:
        """The engine raised: the finding that explains it, if the model reports its invariant there."""
        reported = check_step(model)
        for f in findings_of(self.findings_engine, self.cfg.engine_version):
            shown = next((v for v in reported if v.invariant == f.invariant), None)
            if f.engine_raises and shown is not None and f.shows(self.cfg, self.reference_run):
                self.explained_errors.add(record.step)
                self.judged.append(Violation(f.invariant, record.step, f"{shown.message}; {self.label} raised {record.error} "
                                             f"there ({f.id}, {f.spec})"))
                return


def parting(model: StepRecord, engine: StepRecord, running_before: tuple[str, ...], fields: tuple[str, ...],
            ours: StepView, theirs: StepView, label: str) -> str:
    """``rule: request: what the model's pass did, and what the engine's did`` for the first
    request (in the model's pass order) whose grant differs; else the preemptions, drafts,
    finished requests or blocks in use that differ."""
    lim = model.limits
    d = lim.draft_slots
    order = [e.request_id for e in model.ledger or ()] + list(model.num_scheduled_tokens)
    order += [rid for rid in engine.num_scheduled_tokens if rid not in order]
    refunds = [e for e in model.ledger or () if e.kind == "refund"]
    after = "" if not refunds else " after the same-step refund of " + ", ".join(
        f"request {e.request_id} ({e.tokens} tokens, {e.tokens + d} input)" for e in refunds)
    for rid in dict.fromkeys(order):
        ours_grant, theirs_grant = model.num_scheduled_tokens.get(rid, 0), engine.num_scheduled_tokens.get(rid, 0)
        if ours_grant == theirs_grant:
            continue
        loop = "running" if rid in running_before else "waiting"
        if refunds and rid in {e.request_id for e in refunds}:
            rule = REFUND
        elif ours_grant == 0 and rid in model.preempted:
            rule = PREEMPTION
        elif ours_grant == 0:
            rule = RUNNING_EXIT if loop == "running" else WAITING_EXIT
        else:
            rule = RUNNING_GRANT if loop == "running" else WAITING_GRANT
        ours_text = (f"grants {ours_grant} ({_bound(model, rid, ours_grant)})" if ours_grant
                     else f"grants nothing ({_why_not(model, rid)})")
        theirs_text = f"{label} grants {theirs_grant}" if theirs_grant else f"{label} grants nothing"
        return (f"{rule}: request {rid} ({loop}): the model's pass{after} {ours_text}; {theirs_text} "
                f"(d = {d}, T = {lim.max_num_scheduled_tokens}, B = {lim.max_num_batched_tokens})")
    if "preempted" in fields:
        return (f"{PREEMPTION}: the model preempts {list(model.preempted)}, {label} {list(engine.preempted)} "
                f"(in order){after}")
    if "scheduled_draft_tokens" in fields:
        return (f"{DRAFTS}: the model schedules {dict(ours.scheduled_draft_tokens)}, {label} "
                f"{dict(theirs.scheduled_draft_tokens)}")
    if "finished" not in fields:
        return (f"{KV_IN_USE}: after the pass the model holds {ours.kv_blocks_in_use} of {lim.num_kv_blocks} "
                f"KV blocks, {label} {theirs.kv_blocks_in_use}")
    return (f"{FINISH}: the model finishes {sorted(ours.finished)}, {label} "
            f"{sorted(theirs.finished)}")


def _bound(model: StepRecord, rid: str, grant: int) -> str:
    """Which bound of the model's grant rule set ``grant``: the budgets it saw, from the ledger."""
    lim = model.limits
    entry = next((e for e in model.ledger or () if e.request_id == rid and e.kind == "grant"), None)
    if entry is None:
        return "no ledger"
    demand = model.num_tokens[rid] + model.scheduled_draft_tokens.get(rid, 0) - model.computed_before[rid]
    bounds = [("its demand", demand), ("the token budget", entry.token_before)]
    if entry.input_before is not None:
        bounds.append((f"the input budget {entry.input_before} less d", entry.input_before - lim.draft_slots))
    bounds.append(("max_model_len", lim.max_model_len - model.computed_before[rid] - lim.sampled_tokens))
    named = [f"{name} {value}" if not name.startswith("the input") else f"{name} = {value}"
             for name, value in bounds if value == grant]
    return f"= {' = '.join(named)}" if named else f"token budget {entry.token_before}, input {entry.input_before}"


def _why_not(model: StepRecord, rid: str) -> str:
    """Why the model's pass left ``rid`` out: the budgets when its loop ended."""
    lim = model.limits
    last = (model.ledger or ())[-1:] or ()
    token = last[0].token_after if last else model.initial_token_budget
    rest = last[0].input_after if last else model.initial_input_budget
    if token is not None and token <= 0:
        return "the token budget is spent"
    if rest is not None and rest <= lim.draft_slots:
        return f"its loop stops at input budget {rest} <= d = {lim.draft_slots}"
    return f"budgets left: token {token}, input {rest}; no KV room or no seat"
