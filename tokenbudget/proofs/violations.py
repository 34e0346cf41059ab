"""The step invariants of ``tokenbudget/spec/invariants.py`` as conditions on a symbolic pass.

``spec`` judges StepRecords with Python predicates that cannot run on z3 terms, so the
prover states the ledger invariants once more here, over the PassResult of the skeleton;
``model-len`` and ``spec-shape`` call the spec's own per-grant predicates
(``tokenbudget/spec/grant_rules.py``). Each function is True (or a z3 term that is true) exactly when
the spec would report a violation of that id in the step. The restatements are kept honest from both
sides: every counterexample trace is judged by the spec's own predicates on replay,
and ``tests/integration/test_proofs_pass.py`` compares these with ``spec.check_step`` on concrete
passes.
"""
from __future__ import annotations

from typing import Callable

from ..spec import grant_rules
from ..spec.invariants import INVARIANTS, LEDGER, model_error as spec_model_error
from ..spec.intlike import BoolLike, IntLike, and_, ite, max_, min_, not_, or_
from .pass_skeleton import PassConfig, PassResult

Violated = Callable[[PassConfig, PassResult], BoolLike]


def input_budget_nonnegative(cfg: PassConfig, r: PassResult) -> BoolLike:
    if r.initial.input is None:
        return False
    return or_(r.initial.input < 0, *(and_(e.happened, e.after.input < 0) for e in r.ledger))


def token_cap(cfg: PassConfig, r: PassResult) -> BoolLike:
    return r.total(r.grant) > cfg.policy.token_cap(cfg.params)


def input_rows_cap(cfg: PassConfig, r: PassResult) -> BoolLike:
    return r.total(r.rows) > cfg.params.max_num_batched_tokens


def exact_refund(cfg: PassConfig, r: PassResult) -> BoolLike:
    """A refund that does not give back exactly what the refunded grant charged (the
    ledger's continuity holds by construction: budgets move only in ``spend``)."""
    wrong = []
    for e in r.ledger:
        if e.kind != "refund":
            continue
        token = e.after.token - e.before.token != e.charge.token
        if e.after.input is not None:
            token = or_(token, e.after.input - e.before.input != e.charge.input)
        wrong.append(and_(e.happened, token))
    return or_(*wrong)


def seq_cap(cfg: PassConfig, r: PassResult) -> BoolLike:
    return sum((ite(c, 1, 0) for c in r.running_after), 0) > cfg.params.max_num_seqs


def model_len(cfg: PassConfig, r: PassResult) -> BoolLike:
    max_len = cfg.params.max_model_len
    return or_(*(and_(s, not_(grant_rules.fits_model_len(c, g, max_len)))
                 for s, c, g in zip(r.scheduled, r.computed_before, r.grant)))


def spec_shape(cfg: PassConfig, r: PassResult) -> BoolLike:
    k = cfg.params.num_speculative_tokens
    return or_(*(and_(s, not_(grant_rules.spec_shape(g, d, pad, pre, k)))
                 for s, g, d, pad, pre in zip(r.scheduled, r.grant, r.drafts, r.padded, r.prefill)))


def model_error(cfg: PassConfig, r: PassResult) -> BoolLike:
    """The loop raises: the waiting loop came to admit a grant <= 0 (the one raise the
    skeleton follows; the rest of such a pass is not the model's)."""
    return r.crashed


MODEL_ERROR = spec_model_error.id

# The invariants a pass decides, from the registry: the ledger's, the per-grant ones, and the
# raise the skeleton follows; each restated above under its spec predicate's name.
VIOLATED: dict[str, Violated] = {
    inv.id: globals()[inv.predicate.__name__] for inv in INVARIANTS.values()
    if inv.kind == LEDGER or inv.per_grant or inv.id == MODEL_ERROR
}


def work_gap(cfg: PassConfig, r: PassResult, unserved: IntLike, kv_room: IntLike) -> IntLike:
    """``spec.work_gap``: budget left unused while queued requests wanted it, where the
    runner (one more request's draft slots included) and the KV pool had room."""
    p = cfg.params
    rows_room = p.max_num_batched_tokens - r.total(r.rows) - cfg.need.draft_slots
    return max_(0, min_(rows_room, kv_room, unserved))
