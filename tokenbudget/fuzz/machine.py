"""The fuzzing state machine: generate ops, execute them on a target, judge every step."""
from __future__ import annotations

import hashlib
import math
import sys
import time
from collections import Counter
from dataclasses import dataclass, field, replace
from typing import Any, Callable, ClassVar, Mapping, Sequence

from hypothesis import strategies as st
from hypothesis import reject, target
from hypothesis.control import current_build_context
from hypothesis.errors import StopTest
from hypothesis.internal.conjecture.engine import ConjectureRunner
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from ..model import POLICY_ERROR, BudgetConfig, BudgetPolicy, ConfigError, PolicyError, builtin_policies
from ..model.findings import shown_finding
from ..model.base_gap import base_policy, gap_against_base, gap_violation, same_state
from ..spec import interrupts
from ..spec.invariants import (INVARIANTS, RequestAccounting, Violation, check_step, drain_steps_left, ends_in_fixpoint,
                               no_request_lost, progress, work_gap)
from ..spec.records import RequestState, StepRecord
from ..spec.target import describe, release
from ..spec.trace import AbortOp, AddOp, Op, StepOp, Trace, ViolationExpectation
from .aimed_plans import aimed_plans
from .config_strategies import (asks_more_pool_of, config_space, configs, priority_wave_configs, rare_path_configs,
                                same_step_refund_configs)
from .coverage import example_key, paths_taken
from ..spec.execution import Execution
from .failures import MODEL_ERROR, FuzzFailure, error_kind, failure, identity, is_known, kind_of
from ..model.target import ModelTarget, TargetFactory
from .past_edge_configs import past_edge_configs
from .request_shapes import (PATTERNS, RequestShape, accepted_drafts, bursts, page_bursts, priority_waves,
                             request_shapes, resolve, staggered_arrivals)
from .trace_starts import TraceStart, next_index, starts_name, trace_starts

DEFAULTS = BudgetConfig().to_dict()
WAVE_PASSES = 2  # a priority wave's admission and the pass after it, where it preempts and refunds
TICK_EVERY = 512  # steps between two calls of ``FuzzStats.tick`` inside one example (it paces its own output)
REQUESTS = st.lists(request_shapes(), min_size=1, max_size=3)
ALL_SHAPES, SCALES, RARE_PATHS = "all", "scales", "rare-paths"  # which configs a machine draws (``machine_class``)


class BudgetSpent(BaseException):
    """The session's budget (examples or seconds) ran out before any failure: raised as an
    example would start, a BaseException so that Hypothesis stops at once (it may then
    complain of the example cut short; ``stats.stopped`` says why)."""


@dataclass
class FuzzStats:
    """Counters shared by every run of one machine class. ``first_failure`` holds, per
    failure kind, the seconds from ``started`` to the step where it was first seen
    (before any shrinking); ``coverage`` the steps that took each rare path
    (``fuzz.coverage``); ``tick`` is called as each example starts, and every TICK_EVERY steps. ``max_examples``
    and ``deadline`` (perf_counter) bound the examples run, shrinking included: see
    ``FuzzMachine.deploy``. While ``starting`` (no target built yet) ``deadline`` caps the
    start-up; the first target built (``target_built``) starts the ``fuzz_seconds``, which
    never run past ``end``."""

    started: float = field(default_factory=time.perf_counter)
    examples: int = 0
    steps: int = 0
    coverage: Counter[str] = field(default_factory=Counter)
    first_failure: dict[str, float] = field(default_factory=dict)
    seen: dict[str, tuple[FuzzFailure, int]] = field(default_factory=dict)  # per identity: its first failure, example
    raised_at: int = 0  # examples run when a failure was first raised
    raised_kind: str | None = None  # the kind of the first failure raised: the one Hypothesis shrinks
    tick: Callable[["FuzzStats"], None] | None = None
    max_examples: int | None = None
    deadline: float | None = None
    stopped: bool = False  # the budget ran out (BudgetSpent raised, or shrinking ended), or ``cut_short`` ended the run
    cut_short: FuzzFailure | None = None  # found draining an example Hypothesis had cut short, which it drops
    starting: bool = False
    fuzz_seconds: float | None = None  # the deadline once a target is built: that many seconds on; None: none
    began: float | None = None  # perf_counter when the first target was built, while ``starting``
    end: float | None = None  # perf_counter past which no example starts, start-up or not

    def target_built(self) -> None:
        """A target was built (or refused its config): start-up, if it lasted, ends now."""
        if self.starting:
            self.starting, self.began = False, time.perf_counter()
            deadline = math.inf if self.fuzz_seconds is None else self.began + self.fuzz_seconds
            deadline = min(deadline, math.inf if self.end is None else self.end)
            self.deadline = None if deadline == math.inf else deadline

    def spent(self, reserve: int = 0) -> bool:
        """Whether the budget is spent, keeping ``reserve`` examples of it."""
        return (self.max_examples is not None and self.examples + reserve >= self.max_examples) or \
            (self.deadline is not None and time.perf_counter() >= self.deadline)


def compact_config(cfg: BudgetConfig) -> dict[str, Any]:
    """The config's keys that differ from BudgetConfig's defaults, as a trace writes them."""
    return {key: value for key, value in cfg.to_dict().items() if DEFAULTS[key] != value}


class FuzzMachine(RuleBasedStateMachine):
    """Rules and checks shared by every machine; ``machine_class`` makes the concrete
    class for one policy, target and config strategy."""

    policy_spec: ClassVar[str]
    policy: ClassVar[BudgetPolicy]
    target_factory: ClassVar[TargetFactory]
    stats: ClassVar[FuzzStats]
    found_by: ClassVar[str]
    known: ClassVar[frozenset[str]] = frozenset()  # kinds (every mechanism) or identities not to raise: the run ends
    reported: ClassVar[frozenset[str]] = frozenset()  # identities found already: these exactly, not their kinds
    max_work_gap: ClassVar[int | None] = None  # tokens beyond the base's gap a step may leave; None: not judged
    base: ClassVar[BudgetPolicy | None] = None  # the built-in the policy derives from, when judged against it
    aims: ClassVar[bool] = True  # report target() scores: only Hypothesis's target phase uses them

    def __init__(self) -> None:
        super().__init__()
        self.cfg: BudgetConfig | None = None
        self.execution: Execution | None = None
        self.beside: Execution | None = None  # the base on the same ops, while in the same state
        self.accounting = RequestAccounting()  # no-request-lost over the events not yet judged
        self.ops: list[Op] = []
        self.num_added = 0
        self.live: dict[str, RequestState] = {}  # added, not yet seen finished or aborted
        self.broken = False  # a check failed or an op raised: no more ops (teardown included)
        self.max_row_use = 0.0  # the largest share of B a step's runner rows took
        self.max_preempted = 0  # the most requests one step preempted
        self.max_kv_use = 0.0  # the largest share of the KV pool a step held
        self.num_judged = 0  # the target's own judgements (``judged``) already read
        self.paths_seen: set[str] = set()  # the rare paths this example took

    # -- generate -----------------------------------------------------------------------
    def deploy(self, cfg: BudgetConfig) -> None:
        """Start the target; the initialize rule of each concrete class calls this."""
        self.cfg = cfg
        stats = type(self).stats
        final = current_build_context().is_final  # Hypothesis's replay of the failure it reports: not counted
        if not final and stats.cut_short is not None:  # the failure Hypothesis could not take ends the run
            stats.stopped = True
            raise BudgetSpent
        if not final and stats.spent(reserve=1 if stats.raised_kind else 0):
            stats.stopped = True
            if stats.raised_kind is None:
                raise BudgetSpent
            _end_shrinking()  # this example is the last one
        try:
            try:
                made = type(self).target_factory(cfg, type(self).policy)
            finally:
                stats.target_built()
        except ConfigError:  # the target (a real engine) refuses a config the policy accepts
            reject()
        except PolicyError as e:  # the user policy failed while the target was built
            self.broken = True
            stats.examples += not final
            stats.raised_kind = stats.raised_kind or POLICY_ERROR
            raise failure(POLICY_ERROR, (), str(e), Trace(
                policy=type(self).policy_spec, config=compact_config(cfg), ops=(), description=str(e),
                found_by=type(self).found_by)) from None
        except Exception as e:  # the model itself raised while it was built: a model-error, on this config
            self.broken = True
            stats.examples += not final
            crash = Violation(MODEL_ERROR, None, f"the scheduler raised {describe(e)} while it was built")
            stats.raised_kind = stats.raised_kind or MODEL_ERROR
            raise failure(MODEL_ERROR, (crash,), None, Trace(
                policy=type(self).policy_spec, config=compact_config(cfg), ops=(),
                expect=(ViolationExpectation(MODEL_ERROR),), description=str(crash),
                found_by=type(self).found_by)) from None
        self.execution = Execution(made)
        base = type(self).base
        if base is not None:
            try:
                self.beside = Execution(type(self).target_factory(cfg, base))
            except Exception:  # the base refuses the config (or cannot run it): nothing to judge against
                self.beside = None
        stats.examples += not final
        if stats.tick is not None:
            stats.tick(stats)

    @rule(requests=REQUESTS)
    def add(self, requests: list[RequestShape]) -> None:
        if self.broken:
            return
        assert self.cfg is not None and self.execution is not None
        lim = self.execution.run.limits
        chunk = min(lim.max_num_batched_tokens - lim.draft_slots, lim.max_num_scheduled_tokens,
                    self.cfg.long_prefill_token_threshold or lim.max_num_batched_tokens)
        for shape in requests:
            op = resolve(shape, self.cfg, max(1, chunk), lim.draft_slots, self.num_added,
                         type(self).policy.loop.longest_prompt(self.cfg))
            self.num_added += 1
            self._queue(op)

    @precondition(lambda self: bool(self.live))
    @rule(count=st.integers(1, 8), pattern=st.sampled_from(PATTERNS), seed=st.integers(0, 255))
    def step(self, count: int, pattern: str, seed: int) -> None:
        assert self.cfg is not None
        for i in range(count):
            if self.broken:
                return
            self._step(accepted_drafts(pattern, seed + i, list(self.live), self.cfg.num_speculative_tokens))

    @precondition(lambda self: bool(self.live) and not self.broken)
    @rule(index=st.integers(0, 255))
    def abort(self, index: int) -> None:
        self._drop(list(self.live)[index % len(self.live)])

    def replay_start(self, start: TraceStart) -> None:
        """Deploy the start's config and apply its ops, judged as the rules' own, while the run is live."""
        self.deploy(start.config)
        for op in start.ops:
            if self.broken:
                return
            if isinstance(op, AddOp):
                self._queue(op)
            elif isinstance(op, StepOp):
                self._step(op.accepted)
            elif op.id in self.live:
                self._drop(op.id)
        self.num_added = next_index(start.ops)

    def _queue(self, op: AddOp) -> None:
        """Apply an add; its request is live, waiting."""
        self._apply(op)
        self.live[op.id] = RequestState("waiting", 0, 0, op.max_tokens, op.prompt_len)

    def _drop(self, rid: str) -> None:
        """Abort a live request."""
        self._apply(AbortOp(rid))
        del self.live[rid]

    def _idle_steps(self, count: int) -> None:
        """Up to ``count`` steps accepting no draft, while the run is live."""
        for _ in range(count):
            if self.broken or not self.live:
                return
            self._step({})

    # -- execute ------------------------------------------------------------------------
    def _apply(self, op: Op) -> StepRecord | None:
        """Record the op, then apply it. An exception leaves the run broken, so teardown
        applies nothing more: one inside the model adding or aborting a request is a
        ``model-error`` (a user policy's own, a ``policy-error``); a refused add (ValueError,
        a generator's bug) propagates."""
        assert self.execution is not None
        self.ops.append(op)
        try:
            record = self.execution.apply(op)
            self._apply_beside(op)
            return record
        except (ValueError, BudgetSpent):
            self.broken = True
            raise
        except PolicyError as e:
            self._judge((), f"{type(e).__name__}: {e}")
        except Exception as e:
            interrupts.check()  # Ctrl-C, turned into another exception on the way: not the model's fault
            where = f"ops[{len(self.ops) - 1}]"
            self._judge((Violation(MODEL_ERROR, None, f"the scheduler raised {describe(e)} in {where}"),))
        return None  # a kind known already: the run just ends

    def _step(self, accepted: Mapping[str, int]) -> None:
        assert self.execution is not None
        interrupts.check()  # a Ctrl-C that Hypothesis or a destructor let pass ends the run here
        stats = type(self).stats
        if stats.deadline is not None and time.perf_counter() >= stats.deadline:
            # a long example (a long drain) ends with the budget, not after it
            stats.stopped = True
            if stats.raised_kind is None:
                raise BudgetSpent
            if not current_build_context().is_final:  # shrinking: this example is dropped, the shrinking ends
                _end_shrinking()
                reject()
        record = self._apply(StepOp(dict(accepted)))
        if record is None:
            return
        stats.steps += 1
        if stats.tick is not None and not stats.steps % TICK_EVERY:  # a long drain shows progress too
            stats.tick(stats)
        assert self.cfg is not None
        taken = paths_taken(_reference_of(self.execution.target, record), self.cfg)
        stats.coverage.update(taken)
        stats.coverage.update(example_key(path) for path in taken if path not in self.paths_seen)
        self.paths_seen.update(taken)
        for rid, state in self.execution.run.outcomes[-1].requests.items():
            if rid in self.live:
                if state.status in ("finished", "aborted"):
                    del self.live[rid]
                else:
                    self.live[rid] = state
        self.max_row_use = max(self.max_row_use, record.total_runner_rows / record.limits.max_num_batched_tokens)
        self.max_preempted = max(self.max_preempted, len(record.preempted))
        self.max_kv_use = max(self.max_kv_use, record.kv_blocks_in_use / record.limits.num_kv_blocks)
        self._judge(self._step_violations(record), record.error)
        if self.beside is not None and not self.broken:
            self._judge(self._gap_against_base(record))

    def _step_violations(self, record: StepRecord) -> tuple[Violation, ...]:
        """The spec's verdict on the step, and what a target that runs the model beside it
        judged since the last step (``spec.target.Target``): a crash a finding explains is
        that finding's violation alone: the engine raised inside the step, so its record is partial."""
        assert self.execution is not None
        target = self.execution.target
        found = check_step(record)
        judged = getattr(target, "judged", None)
        if judged is None:
            return tuple(found)
        if record.step in target.explained_errors:
            found = []
        fresh, self.num_judged = judged[self.num_judged:], len(judged)
        return tuple(found) + tuple(fresh)

    def _apply_beside(self, op: Op) -> None:
        """Apply the op to the base too, while the runs are in the same state; a base that
        raises leaves the comparison."""
        if self.beside is None:
            return
        try:
            self.beside.apply(op)
        except Exception:
            self.beside = None

    def _gap_against_base(self, record: StepRecord) -> tuple[Violation, ...]:
        """The step's ``work-conserving`` violation when it leaves more work undone than the
        base's did from the same state, by over ``max_work_gap`` tokens; the base stops
        where the states part."""
        assert self.execution is not None and self.beside is not None
        ours, theirs = self.execution.run, self.beside.run
        index, limit = len(ours.steps) - 1, type(self).max_work_gap
        assert limit is not None
        violation = None
        if work_gap(record) > limit:  # else its excess over the base's gap cannot exceed the limit
            violation = gap_violation(gap_against_base(None, type(self).policy, ours, theirs, start=index), limit)
        if not same_state(ours, theirs, index):
            self.beside = None
        return () if violation is None else (violation,)

    # -- check --------------------------------------------------------------------------
    @invariant()
    def no_request_is_lost(self) -> None:
        if self.execution is not None and not self.broken:
            self._judge(self._requests_lost())

    def teardown(self) -> None:
        """Stop adding and drain; a drain past the spec's bound is a ``progress`` violation.

        The spec bounds the drain from the requests live when it began, which may be before
        this teardown (``drain_steps_left`` reads it from the run after the first step), so a
        stuck run stops at the very step where ``progress_bound`` first judges it. An example
        Hypothesis cut short (out of data) is drained too: what that finds Hypothesis would
        drop, so it is kept in ``stats.cut_short`` and ends the run, which reports it. The
        targets are released at the end, whatever happened.
        """
        try:
            if self.execution is None or self.broken:
                return
            stats = type(self).stats
            cut_short = stats.raised_kind is None and isinstance(sys.exc_info()[1], StopTest)
            try:
                self._drain()
            except FuzzFailure as found:
                if not cut_short:
                    raise
                stats.cut_short = found  # Hypothesis ran out of data for this example: it would drop the failure
        finally:
            for execution in (self.execution, self.beside):
                if execution is not None:
                    release(execution.target)

    def _drain(self) -> None:
        assert self.execution is not None
        run = self.execution.run
        left: int | None = None  # steps before the spec judges the drain
        repeats = 0  # drain steps in a row that repeated the one before (but its number)
        progress_known = any(kind_of(k) == progress.id for k in type(self).known | type(self).reported)
        while self.live and not self.broken and left != 0:
            self._step({})
            if self.broken:
                break
            if ends_in_fixpoint(run):
                break  # a fixpoint: progress judges it now, and the rest of the drain would repeat it
            left = drain_steps_left(run) if left is None else left - 1
            repeats = repeats + 1 if len(run.steps) > 1 and _repeats(run.steps[-2], run.steps[-1]) else 0
            if repeats >= STUCK_REPEATS and progress_known:
                self.broken = True  # looks stuck, and progress is known: the run ends quietly
                return
        if not self.broken:
            self._judge(self._requests_lost() + tuple(progress.over_run(run)))
        if not self.broken and type(self).aims:  # else only a database's Pareto front keeps them, at a cost
            target(self.max_row_use, label="input rows / B, most in a step")
            target(float(self.max_preempted), label="preemptions, most in a step")
            target(self.max_kv_use, label="KV blocks in use / pool, most in a step")

    def _requests_lost(self) -> tuple[Violation, ...]:
        """``no-request-lost`` over the events since the last call: earlier ones held, or the
        run would be broken."""
        assert self.execution is not None
        return tuple(Violation(no_request_lost.id, step, message)
                     for step, message in self.accounting.feed(self.execution.run))

    def _judge(self, violations: tuple[Violation, ...], error: str | None = None) -> None:
        """Raise the failure of the first violation (or target error) whose identity
        (``failures.identity``: its invariant and mechanism) is not yet known; a run that
        shows only known ones ends quietly: its later rules do nothing."""
        if not violations and error is None:
            return
        self.broken = True
        extra = error_kind(error) if error else None
        identities = tuple(dict.fromkeys(identity(v, self._finding(v)) for v in violations)) + \
            ((extra,) if extra else ())
        kinds = tuple(dict.fromkeys(kind_of(i) for i in identities))
        stats = type(self).stats
        for found in identities:
            stats.first_failure.setdefault(found, time.perf_counter() - stats.started)
        new = [found for found in identities
               if not is_known(found, type(self).known) and found not in type(self).reported]
        if new:
            trace = self._trace(kinds, violations, error)
            for found in new:  # one this run shows beside the one raised, or only while shrinking, is kept too
                stats.seen.setdefault(found, (failure(found, violations, error, trace), stats.examples))
            stats.raised_at = stats.raised_at or stats.examples
            stats.raised_kind = stats.raised_kind or new[0]
            raise failure(new[0], violations, error, trace)

    def _finding(self, violation: Violation) -> str | None:
        """The id of the finding about the policy's engine loop whose matcher recognises the
        violation in the model's run: on the model its own run, on a real engine's target the
        model's beside it (``reference_run``). None on a real engine's target without one, and
        where no finding's matcher recognises it."""
        assert self.cfg is not None and self.execution is not None
        policy = type(self).policy
        engine = getattr(policy, "engine", None)
        target = self.execution.target
        run = getattr(target, "reference_run", None)
        if run is None and isinstance(target, ModelTarget):
            run = self.execution.run
        if engine is None or run is None or violation.invariant not in INVARIANTS:
            return None
        cfg = getattr(self.execution.target, "cfg", None) or self.cfg  # as the target runs it: its engine's version
        try:
            version = policy.engine_version(cfg)
            found = shown_finding(engine, violation.invariant, cfg, run, version)
        except Exception:  # a user policy's own method failing here is judged elsewhere
            return None
        return None if found is None else found.id

    def _trace(self, kinds: tuple[str, ...], violations: tuple[Violation, ...], error: str | None) -> Trace:
        assert self.cfg is not None and self.execution is not None
        parts = [str(violations[0])] if violations else []
        if error is not None and error_kind(error):  # a model-error's violation names its error already
            steps = self.execution.run.steps
            where = f" in step {steps[-1].step}" if steps and steps[-1].error == error else ""
            parts.append(f"the target raised{where}: {error}")
        return Trace(
            policy=type(self).policy_spec,
            config=compact_config(getattr(self.execution.target, "cfg", None) or self.cfg),  # as the target runs it
            ops=tuple(self.ops),
            expect=tuple(ViolationExpectation(kind) for kind in kinds if kind in INVARIANTS),
            description="; ".join(parts),
            found_by=type(self).found_by,
        )


def _reference_of(target: Any, record: StepRecord) -> StepRecord:
    """The record the coverage counters read: the model's of the same step where the target
    runs it beside it and the two have not parted (it has the ledger), else the target's own."""
    run = getattr(target, "reference_run", None)
    if run is None or getattr(target, "parted", False) or not run.steps or run.steps[-1].step != record.step:
        return record
    return run.steps[-1]


STUCK_REPEATS = 16  # idle drain steps in a row, each equal to the one before, that end a run known to stall


def _repeats(before: StepRecord, after: StepRecord) -> bool:
    """Whether ``after`` grants nothing, preempts nothing and is ``before`` again but its
    number. A drain has no input, so a run of such steps goes on to the bound unless state
    the records do not show changes: the rule is a heuristic, used only where ``progress``
    is known, so at worst it misses what the rest of that drain would have shown."""
    return (after.total_scheduled_tokens == 0 and not after.preempted and after.error is None
            and replace(after, step=before.step) == before)


def database_key(policy_spec: str, target_name: str, config_name: str, max_work_gap: int | None = None,
                 engine: str = "") -> bytes:
    """What tells this machine's saved examples from every other's in an example database;
    ``engine`` is a real engine's identity (release and folder, ``EngineDescriptor.identity``)."""
    judged = "" if max_work_gap is None else f"|max-work-gap {max_work_gap}"
    on = f"|engine {engine}" if engine else ""
    return hashlib.sha256(f"tokenbudget fuzz|{policy_spec}|{target_name}|{config_name}{judged}{on}".encode()).digest()


def _end_shrinking() -> None:
    """Make Hypothesis end its shrinking after the example now starting, as it does past its
    own shrinking time limit: it then replays the smallest failure, with its program.
    Hypothesis has no public way to do this: the runner running this example is found on
    the stack and its shrinking deadline moved to now."""
    frame = sys._getframe(1)
    while frame is not None:
        runner = frame.f_locals.get("self")
        if isinstance(runner, ConjectureRunner):
            runner.finish_shrinking_deadline = -math.inf
            return
        frame = frame.f_back
    raise BudgetSpent


def machine_class(policy_spec: str, policy: BudgetPolicy, target_factory: TargetFactory = ModelTarget,
                  config_strategy: st.SearchStrategy[BudgetConfig] | None = None,
                  found_by: str = "Hypothesis (tokenbudget fuzz)", target_name: str = "model",
                  config_name: str | None = None, max_work_gap: int | None = None,
                  shapes: str = ALL_SHAPES, engine: str = "", starts: Sequence[Trace] = ()) -> type[FuzzMachine]:
    """A state machine fuzzing ``policy`` (loaded from ``policy_spec``, the name a trace
    records) on targets made by ``target_factory`` (named ``target_name``), with configs
    from ``config_strategy`` (default: every scale ``fuzz.config_strategies.configs`` knows
    and, on the model, the rare-path shapes of the policy's loop; ``shapes`` picks SCALES or
    RARE_PATHS alone; a strategy given is named by ``config_name``, else by its repr). A user
    policy with a built-in base is judged against it when ``max_work_gap`` is given. Raises
    ConfigError when no config of the policy can be found. Saved examples are keyed by
    ``database_key`` (policy, target, strategy, work gap, the real ``engine``'s release and
    folder), so no other machine or release replays them (SPEC §7). Given ``starts`` (traces
    the policy accepts the configs of), one run in two starts from one of them
    (``trace_starts``): the first replays the first trace whole.
    """
    space = config_space(policy) if config_strategy is None else None
    strategy = config_strategy if space is None else configs(policy, space)
    # a real engine shows no ledger: the same-step refund and the input-budget stop are drawn on purpose
    real_engine = target_name != "model"
    # the rare paths of the findings, shaped through the policy's loop: a user policy's too
    rare = rare_path_configs(policy, space) if space and not real_engine and shapes != SCALES else {}
    rare_paths = list(rare.values())
    # a user policy is new code on its loop: it draws the shapes a real engine's run gets too, configs past the
    # shared requirements it drops, and the start plans aimed at its loop's paths (``aimed_plans``)
    aimed = real_engine or bool(rare_paths and policy_spec not in builtin_policies())
    if rare_paths and aimed:
        rare_paths += [s for s in (same_step_refund_configs(policy, space), past_edge_configs(policy, space))
                       if not s.is_empty]
    full_batches = aimed_plans(policy, rare, space) if aimed and rare and space is not None else st.nothing()
    if config_strategy is None and real_engine:
        shaped = same_step_refund_configs(policy)
        strategy = st.one_of(strategy, shaped, shaped, shaped)
    elif rare_paths and shapes == RARE_PATHS:
        strategy = st.one_of(*rare_paths)
    elif rare_paths:  # the scales' branches beside one per rare path's shape (on the model), each drawn alike
        strategy = st.one_of(strategy, *rare_paths)
    if config_name is None:
        config_name = "configs" if config_strategy is None else repr(config_strategy)
        config_name += "" if shapes == ALL_SHAPES or config_strategy is not None else f"|{shapes}"
    config_name += f"|{starts_name(starts)}" if starts else ""

    # A policy whose pool must hold more than one sequence (SGLang's) retracts decodes: its runs
    # may start with a burst of similar requests, which retract together at page boundaries.
    first = st.one_of(REQUESTS, bursts()) if real_engine or asks_more_pool_of(policy) else REQUESTS
    if not real_engine and asks_more_pool_of(policy):  # and, on the model, bursts that decode from full pages
        first = st.one_of(first, page_bursts(), page_bursts())

    class Machine(FuzzMachine):
        @initialize(cfg=strategy, requests=first)
        def start(self, cfg: BudgetConfig, requests: list[RequestShape]) -> None:
            self.deploy(cfg)
            self.add(requests)

    # Under priority, later arrivals run behind less urgent requests: a preemption for them
    # takes back a grant of the same pass, or the least urgent, first in line, preempts itself.
    priority = real_engine or bool(rare_paths and space is not None and "priority" in space.scheduling_policies)
    if priority or not full_batches.is_empty or starts:
        plans = st.tuples(strategy, first, staggered_arrivals() if priority else st.just((0, []))).map(
            lambda p: (*p, 0))
        wave_configs = priority_wave_configs(policy, space) if aimed and config_strategy is None else st.nothing()
        # one_of draws its branches alike, a one_of given to it counting as its branches: the plans above, a wave
        # of short prompts behind a least-urgent request, an aimed plan (a full batch on page edges, ...)
        if not wave_configs.is_empty:
            waves = st.tuples(wave_configs, priority_waves()).map(lambda p: (p[0], *p[1], WAVE_PASSES))
            plans = st.one_of(plans, waves)
        if not full_batches.is_empty:
            plans = st.one_of(plans, full_batches)
        if starts:  # one start in two, the simplest draw (the first run) a start from a trace
            plans = st.sampled_from((trace_starts(starts), plans)).flatmap(lambda chosen: chosen)

        class Machine(FuzzMachine):  # type: ignore[no-redef]
            @initialize(plan=plans)
            def start(self, plan: TraceStart | tuple[BudgetConfig, list[RequestShape], tuple[int, list[RequestShape]],
                                                  int]) -> None:
                """As above, then (some runs) a few steps and more requests: later arrivals, more
                urgent under PRIORITY, run behind less urgent ones (a same-step refund's order);
                after a priority wave, the passes that admit it and refund, after a full batch on page
                edges its prefill and first decodes, before any other rule; or a trace's start."""
                if isinstance(plan, TraceStart):
                    self.replay_start(plan)
                    return
                cfg, requests, later, passes = plan
                self.deploy(cfg)
                self.add(requests)
                wait, more = later
                self._idle_steps(wait if more else 0)
                self.add(more)
                self._idle_steps(passes)

    Machine.__name__ = Machine.__qualname__ = "Fuzz_" + "".join(c if c.isalnum() else "_" for c in policy_spec)
    Machine.policy_spec = policy_spec
    Machine.policy = policy
    Machine.target_factory = target_factory
    Machine.stats = FuzzStats()
    Machine.found_by = found_by
    base = None if max_work_gap is None or policy_spec in builtin_policies() else base_policy(policy)
    Machine.base = None if base is None else builtin_policies()[base]()
    Machine.max_work_gap = None if base is None else max_work_gap
    Machine._hypothesis_internal_add_digest = database_key(  # type: ignore[attr-defined]
        policy_spec, target_name, config_name, Machine.max_work_gap, engine)
    return Machine
