"""The named invariants, each judged by one pure predicate.

Step invariants take a StepRecord, run invariants a RunRecord, config invariants a
ConfigProbe; each returns the list of its violations (empty when it holds). The ids are
stable: output, docs, the verdict manifest and trace expectations use them.
``INVARIANTS`` is the one table of them; everything else derives from it.
"""
from __future__ import annotations

from dataclasses import dataclass
from itertools import chain
from typing import Callable, Mapping, Optional

from . import grant_rules
from .records import RequestState, RunRecord, StepRecord


@dataclass(frozen=True)
class Violation:
    invariant: str
    step: Optional[int]
    message: str

    def __str__(self) -> str:
        where = f"step {self.step}: " if self.step is not None else ""
        return f"{self.invariant}: {where}{self.message}"


@dataclass(frozen=True)
class ConfigProbe:
    """Whether a policy's validation accepted a config, and what a probe run showed.

    ``first_step_grants`` is the total granted by the first step of one request in an
    empty system; ``safety_violations`` the invariant ids a probe workload broke when
    run with validation bypassed.
    """

    accepted: bool
    first_step_grants: int
    safety_violations: tuple[str, ...] = ()


@dataclass(frozen=True)
class Invariant:
    id: str
    kind: str  # safety | liveness | config | efficiency
    scope: str  # step | run | config
    holds_when: str
    check: Callable[..., list[Violation]]


# -- step invariants ------------------------------------------------------------------
def input_budget_nonnegative(rec: StepRecord) -> list[Violation]:
    out = []
    if rec.initial_input_budget is not None and rec.initial_input_budget < 0:
        out.append(Violation("input-budget-nonnegative", rec.step, f"initial input budget {rec.initial_input_budget}"))
    for e in rec.ledger or ():
        if e.input_after is not None and e.input_after < 0:
            out.append(Violation("input-budget-nonnegative", rec.step,
                                 f"input budget {e.input_after} after the {e.kind} of {e.tokens} to {e.request_id}"))
    return out


def token_cap(rec: StepRecord) -> list[Violation]:
    total, cap = rec.total_scheduled_tokens, rec.limits.max_num_scheduled_tokens
    if total > cap:
        return [Violation("token-cap", rec.step, f"{total} tokens scheduled, T = {cap}")]
    return []


def input_rows_cap(rec: StepRecord) -> list[Violation]:
    rows, cap = rec.total_runner_rows, rec.limits.max_num_batched_tokens
    if rows > cap:
        return [Violation("input-rows-cap", rec.step,
                          f"the runner needs {rows} rows, B = {cap} "
                          f"({rec.total_scheduled_tokens} tokens + {rows - rec.total_scheduled_tokens} extra rows)")]
    return []


def exact_refund(rec: StepRecord) -> list[Violation]:
    if rec.ledger is None:
        return []
    out = []
    token, inp = rec.initial_token_budget, rec.initial_input_budget
    live: dict[str, tuple[int, int]] = {}
    for e in rec.ledger:
        if (e.token_before, e.input_before) != (token, inp):
            out.append(Violation("exact-refund", rec.step,
                                 f"budgets jumped from ({token}, {inp}) to ({e.token_before}, {e.input_before}) "
                                 f"before the {e.kind} of {e.request_id}"))
        d_token = e.token_after - e.token_before
        d_input = 0 if e.input_after is None or e.input_before is None else e.input_after - e.input_before
        if e.kind == "grant":
            live[e.request_id] = (-d_token, -d_input)
        elif e.request_id not in live:
            out.append(Violation("exact-refund", rec.step, f"refund to {e.request_id}, which holds no grant"))
        else:
            charged = live.pop(e.request_id)
            if (d_token, d_input) != charged:
                out.append(Violation("exact-refund", rec.step,
                                     f"preempting {e.request_id} returned (token {d_token}, input {d_input}) "
                                     f"but its grant of {e.tokens} charged (token {charged[0]}, input {charged[1]})"))
        token, inp = e.token_after, e.input_after
    return out


def seq_cap(rec: StepRecord) -> list[Violation]:
    if len(rec.running) > rec.limits.max_num_seqs:
        return [Violation("seq-cap", rec.step, f"{len(rec.running)} running, S = {rec.limits.max_num_seqs}")]
    return []


def kv_capacity(rec: StepRecord) -> list[Violation]:
    lim = rec.limits
    out = []
    if rec.kv_blocks_in_use > lim.num_kv_blocks:
        out.append(Violation("kv-capacity", rec.step, f"{rec.kv_blocks_in_use} blocks in use, pool {lim.num_kv_blocks}"))
    for rid, grant in rec.num_scheduled_tokens.items():
        need = grant_rules.kv_slots_needed(rec.computed_before[rid], grant, lim.lookahead, lim.max_model_len)
        held = len(rec.block_tables.get(rid, ())) * lim.block_size
        if held < need:
            out.append(Violation("kv-capacity", rec.step,
                                 f"{rid} holds {held} KV slots but needs {need} (computed + granted + lookahead)"))
    tables = rec.block_tables.values()
    if sum(map(len, tables)) == len(set(chain.from_iterable(tables))):
        return out  # no block is held twice
    owner: dict[int, tuple[str, int]] = {}
    for rid, table in rec.block_tables.items():
        for index, block in enumerate(table):
            first = owner.setdefault(block, (rid, index))
            if first[0] == rid and first[1] == index:
                continue
            if block not in rec.block_keys or first[1] != index:
                out.append(Violation("kv-capacity", rec.step,
                                     f"block {block} is owned by {first[0]} and {rid} without a shared prefix"))
    return out


def model_len(rec: StepRecord) -> list[Violation]:
    out = []
    max_len = rec.limits.max_model_len
    for rid, grant in rec.num_scheduled_tokens.items():
        if not grant_rules.fits_model_len(rec.computed_before[rid], grant, max_len):
            out.append(Violation("model-len", rec.step,
                                 f"{rid}: computed {rec.computed_before[rid]} + granted {grant} + 1 sampled "
                                 f"> max_model_len {max_len}"))
    return out


def spec_shape(rec: StepRecord) -> list[Violation]:
    k = rec.limits.num_speculative_tokens
    out = []
    for rid, drafts in rec.scheduled_draft_tokens.items():
        if not grant_rules.drafts_within_k(drafts, k):
            out.append(Violation("spec-shape", rec.step, f"{rid} scheduled {drafts} drafts, k = {k}"))
        if not grant_rules.prefill_without_drafts(drafts, rid in rec.prefill):
            out.append(Violation("spec-shape", rec.step, f"prefill chunk of {rid} carries {drafts} drafts"))
    for rid in rec.padded:
        if not grant_rules.padded_shape(rec.num_scheduled_tokens[rid], rec.scheduled_draft_tokens.get(rid, 0), k):
            out.append(Violation("spec-shape", rec.step,
                                 f"padded decode {rid} got {rec.num_scheduled_tokens[rid]} rows with "
                                 f"{rec.scheduled_draft_tokens.get(rid, 0)} drafts, not 1 + k = {1 + k}"))
    return out


def progress(rec: StepRecord) -> list[Violation]:
    if rec.progress_possible and rec.total_scheduled_tokens == 0:
        return [Violation("progress", rec.step, "a request could take a token but the step granted none")]
    return []


# -- run invariants -------------------------------------------------------------------
def no_request_lost(run: RunRecord) -> list[Violation]:
    out = []
    status: dict[str, str] = {}  # id -> live | finished | aborted
    computed: dict[str, int] = {}
    for event, arg in run.events:
        if event == "add":
            status[str(arg)] = "live"
        elif event == "abort":
            if status.get(str(arg)) == "live":
                status[str(arg)] = "aborted"
        else:
            index = int(arg)  # type: ignore[arg-type]
            rec = run.steps[index]
            queued = rec.running + rec.waiting
            seen: set[str] = set()
            for rid in queued:
                if rid in seen:
                    out.append(Violation("no-request-lost", rec.step, f"{rid} is queued twice"))
                seen.add(rid)
                if status.get(rid) != "live":
                    out.append(Violation("no-request-lost", rec.step,
                                         f"{rid} is queued but {status.get(rid, 'was never added')}"))
            for rid, s in status.items():
                if s == "live" and rid not in seen:
                    out.append(Violation("no-request-lost", rec.step, f"{rid} is in no queue"))
            if index >= len(run.outcomes):
                continue
            outcome = run.outcomes[index]
            for rid, state in outcome.requests.items():
                if state.num_output_tokens > state.max_tokens:
                    out.append(Violation("no-request-lost", rec.step,
                                         f"{rid} has {state.num_output_tokens} outputs, max_tokens {state.max_tokens}"))
                expected = status.get(rid)
                if expected in ("finished", "aborted") and state.status != expected:
                    out.append(Violation("no-request-lost", rec.step, f"{rid} was {expected}, now {state.status}"))
                if state.status in ("finished", "aborted"):
                    status[rid] = state.status
                elif rid in computed and state.num_computed_tokens < computed[rid] and rid not in outcome.preempted:
                    out.append(Violation("no-request-lost", rec.step,
                                         f"{rid}'s computed tokens went back from {computed[rid]} to "
                                         f"{state.num_computed_tokens} without preemption"))
                computed[rid] = state.num_computed_tokens
    return out


def drain_bound(requests: Mapping[str, RequestState]) -> int:
    """Steps within which, with no new arrivals, every unfinished request must finish:
    twice its remaining prompt and output tokens (room for recomputes), plus slack."""
    live = [s for s in requests.values() if s.status in ("waiting", "running")]
    return 2 * sum(s.num_prompt_tokens + s.max_tokens for s in live) + 2 * len(live) + 8


def progress_bound(run: RunRecord) -> list[Violation]:
    """Liveness: a drain (steps after the last add or abort) longer than the bound leaves nothing."""
    last_op = max((i for i, (e, _) in enumerate(run.events) if e != "step"), default=-1)
    drain = [int(a) for e, a in run.events[last_op + 1:] if e == "step" and int(a) < len(run.outcomes)]  # type: ignore[call-overload]
    if not drain:
        return []
    states = dict(run.added)
    for outcome in run.outcomes[: max(drain[0], 1)]:
        states.update(outcome.requests)
    bound = drain_bound(states)
    for outcome in run.outcomes[max(drain[0], 1): drain[-1] + 1]:
        states.update(outcome.requests)
    aborted = {str(a) for e, a in run.events if e == "abort"}
    last = run.outcomes[drain[-1]]
    left = [rid for rid, s in states.items() if s.status in ("waiting", "running") and rid not in aborted]
    if len(drain) >= bound and left:
        return [Violation("progress", last.step, f"{len(left)} requests unfinished after a {len(drain)}-step drain "
                                                 f"(bound {bound}): {', '.join(left[:5])}")]
    return []


# -- config invariants ----------------------------------------------------------------
def config_sound(probe: ConfigProbe) -> list[Violation]:
    if probe.accepted and probe.first_step_grants <= 0:
        return [Violation("config-sound", None, "the config is accepted but an empty system cannot schedule a token")]
    return []


def config_complete(probe: ConfigProbe) -> list[Violation]:
    if not probe.accepted and probe.first_step_grants > 0 and not probe.safety_violations:
        return [Violation("config-complete", None, "the config is rejected but serves safely")]
    return []


# -- efficiency -----------------------------------------------------------------------
def work_gap(rec: StepRecord) -> int:
    """Tokens left unused although a queued request wanted them and both the runner
    (B rows, one more request's draft slots included) and the KV pool had room."""
    if rec.unserved_demand is None:
        return 0
    lim = rec.limits
    rows_room = lim.max_num_batched_tokens - rec.total_runner_rows - lim.draft_slots
    kv_room = (lim.num_kv_blocks - rec.kv_blocks_in_use) * lim.block_size - lim.lookahead
    return max(0, min(rows_room, kv_room, rec.unserved_demand))


def work_conserving(rec: StepRecord) -> list[Violation]:
    gap = work_gap(rec)
    if gap > 0 and not rec.preempted:
        return [Violation("work-conserving", rec.step, f"{gap} tokens of budget unused while requests waited")]
    return []


INVARIANTS: dict[str, Invariant] = {
    inv.id: inv
    for inv in (
        Invariant("input-budget-nonnegative", "safety", "step", "the input budget is >= 0 at every ledger point",
                  input_budget_nonnegative),
        Invariant("token-cap", "safety", "step", "the sum of grants is <= T", token_cap),
        Invariant("input-rows-cap", "safety", "step",
                  "the sum over scheduled requests of grant + true extra rows is <= B", input_rows_cap),
        Invariant("exact-refund", "safety", "step",
                  "a same-step preemption returns exactly what the grant charged; budgets = initial - live charges",
                  exact_refund),
        Invariant("seq-cap", "safety", "step", "running requests <= S", seq_cap),
        Invariant("kv-capacity", "safety", "step",
                  "blocks in use <= pool; scheduled requests hold computed + granted + lookahead slots; "
                  "no block owned twice outside a shared prefix", kv_capacity),
        Invariant("model-len", "safety", "step", "computed + granted + sampled <= max_model_len", model_len),
        Invariant("spec-shape", "safety", "step",
                  "drafts <= k; a padded decode gets exactly 1 + k rows; prefill chunks carry no drafts", spec_shape),
        Invariant("no-request-lost", "safety", "run",
                  "every added request is in exactly one of waiting, running, finished, aborted; outputs <= "
                  "max_tokens; computed tokens only go back by preemption", no_request_lost),
        Invariant("progress", "liveness", "step+run",
                  "a step grants a token when some request could take one; a drain finishes within a bound",
                  progress),
        Invariant("config-sound", "config", "config",
                  "every accepted config allows progress from an empty system", config_sound),
        Invariant("config-complete", "config", "config",
                  "every rejected config really cannot be served safely", config_complete),
        Invariant("work-conserving", "efficiency", "step",
                  "budget is left unused only when no eligible request could use it (a measured gap)",
                  work_conserving),
    )
}

STEP_CHECKS: tuple[Callable[[StepRecord], list[Violation]], ...] = tuple(
    inv.check for inv in INVARIANTS.values() if inv.scope in ("step", "step+run") and inv.kind != "efficiency"
)
RUN_CHECKS: tuple[Callable[[RunRecord], list[Violation]], ...] = (no_request_lost, progress_bound)


def check_step(rec: StepRecord) -> list[Violation]:
    """Every safety and liveness invariant of one step."""
    out: list[Violation] = []
    for check in STEP_CHECKS:
        out.extend(check(rec))
    return out


def check_run(run: RunRecord) -> list[Violation]:
    """Every step invariant of every step, then the run invariants."""
    out: list[Violation] = []
    for rec in run.steps:
        out.extend(check_step(rec))
    for check in RUN_CHECKS:
        out.extend(check(run))
    return out
