"""A fuzzing session: run the state machine for a number of examples or seconds, collect
the shrunk counterexamples and save each as a trace with its Hypothesis program."""
from __future__ import annotations

import math
import time
import unittest
from collections import Counter
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Callable, Sequence

from hypothesis import HealthCheck, Phase, settings
from hypothesis import seed as hypothesis_seed
from hypothesis.database import ExampleDatabase, InMemoryExampleDatabase, MultiplexedDatabase, ReadOnlyDatabase
from hypothesis import strategies as st
from hypothesis.reporting import with_reporter
from hypothesis.stateful import run_state_machine_as_test

from ..model import POLICY_ERROR, BudgetConfig, PolicyError, get_policy
from ..model.replay import BadInput, ReplayResult, replay_on_model
from ..model.base_gap import replay_judged
from ..spec.invariants import work_conserving
from ..spec.execution import Execution
from ..spec.trace import Trace, ViolationExpectation, write_trace
from .coverage import examples_per_path, steps_per_path
from .failures import MODEL_ERROR, FuzzFailure, failure, identity, is_known, kind_of
from ..spec.target import CONFORMANCE
from .seeded_draws import seeded_draws
from .machine import ALL_SHAPES, BudgetSpent, FuzzMachine, FuzzStats, machine_class
from .trace_starts import usable_starts
from ..spec.shrink import shrink
from ..model.target import ModelTarget, TargetFactory

PHASES = (Phase.explicit, Phase.reuse, Phase.generate, Phase.target, Phase.shrink)  # no explain phase: it is slow
FIRST_BATCH = 25  # examples in the first batch of a timed session; each next one doubles, up to
MAX_BATCH = 100
PROGRESS_EVERY = 0.2  # seconds between progress lines
STARTUP_SECONDS = 600.0  # the default cap on a session's start-up: importing vLLM on a loaded machine takes a minute

Progress = Callable[[str], None]


@dataclass(frozen=True)
class Tally:
    """A session's counts so far (the batch running included), as ``fuzz`` reports them
    to its ``tally`` callback while it runs; ``violations`` are the kinds seen, shrunk or
    not yet, but for those it was told are known (each of them ends up a counterexample
    of the report); ``counterexamples`` those made so far; ``began``: a target was built
    (start-up is over)."""

    examples: int
    steps: int
    coverage: dict[str, int]
    violations: tuple[str, ...]
    counterexamples: tuple["Counterexample", ...] = ()
    began: bool = False


@dataclass(frozen=True)
class Counterexample:
    """A shrunk failure: its kind, what was violated (in the reduced trace), the trace and
    the program that found it, the ops of the program before reduction, when it was first
    seen (seconds into the session, before shrinking), the example of its batch that
    raised it (1: the first, which is a saved one replayed when the database had one),
    the seed of the session, and where trace and program were saved (empty when not
    saved)."""

    kind: str
    message: str
    trace: Trace
    program: tuple[str, ...]
    ops_found: int
    first_seen: float
    example: int
    seed: int
    paths: tuple[str, ...] = ()
    identity: str = ""  # its invariant and mechanism (``failures.identity``); empty: the kind alone

    @property
    def key(self) -> str:
        """What tells it from the session's other counterexamples: its identity."""
        return self.identity or self.kind


@dataclass
class FuzzReport:
    """What a session did: examples and steps run (shrinking included), the steps that
    took each rare path (``fuzz.coverage``), and one counterexample per failure kind found;
    ``seconds`` of fuzzing from the first example, ``startup_seconds`` before it (the whole
    session when no example ran), ``startup_exceeded`` when start-up ran past its cap."""

    policy: str
    target: str
    seed: int
    examples: int = 0
    steps: int = 0
    seconds: float = 0.0
    counterexamples: list[Counterexample] = field(default_factory=list)
    coverage: Counter[str] = field(default_factory=Counter)
    interrupted: bool = False  # Ctrl-C ended the session early
    startup_seconds: float = 0.0
    startup_exceeded: bool = False

    @property
    def steps_per_second(self) -> float:
        return self.steps / self.seconds if self.seconds else 0.0

    @property
    def ok(self) -> bool:
        return not self.counterexamples

    def to_json(self) -> dict[str, object]:
        return {
            "ok": self.ok, "policy": self.policy, "target": self.target, "seed": self.seed,
            "examples": self.examples, "steps": self.steps, "seconds": round(self.seconds, 3),
            "startup_seconds": round(self.startup_seconds, 3), "startup_exceeded": self.startup_exceeded,
            "steps_per_second": round(self.steps_per_second, 1), "coverage": steps_per_path(self.coverage),
            "coverage_examples": examples_per_path(self.coverage),
            "violations": {
                c.key: {"invariant": c.kind, "message": c.message, "first_seen_seconds": round(c.first_seen, 3),
                        "example": c.example, "ops": len(c.trace.ops), "trace": c.paths[0] if c.paths else None,
                        "program": c.paths[1] if c.paths else None}
                for c in self.counterexamples
            },
        }


def fuzz(policy_spec: str, *, target_factory: TargetFactory = ModelTarget, target_name: str = "model",
         examples: int | None = None, seconds: float | None = None, seed: int = 0,
         corpus: str | Path | None = None, progress: Progress = lambda _: None,
         config_strategy: st.SearchStrategy[BudgetConfig] | None = None,
         phases: Sequence[Phase] = PHASES, stop_when_found: frozenset[str] = frozenset(),
         database: ExampleDatabase | None = None, known: frozenset[str] = frozenset(),
         tally: Callable[[Tally], None] = lambda _: None, max_work_gap: int | None = None,
         reduce_seconds: float | None = None, startup_seconds: float = STARTUP_SECONDS,
         started: float | None = None, ends_by: float | None = None, shapes: str = ALL_SHAPES,
         engine: str = "", starts: Sequence[Trace] = ()) -> FuzzReport:
    """Fuzz one policy on one target, drawing the configs ``shapes`` names
    (``machine_class``), one run in two from ``starts`` where the policy accepts their
    configs (``trace_starts``); save counterexamples under ``corpus`` when given;
    ``engine`` (a real engine's release and folder) keys the saved examples."""
    if (examples is None) == (seconds is None):
        raise ValueError("give exactly one of examples and seconds")
    policy = get_policy(policy_spec)
    starts = usable_starts(policy, starts)
    report = FuzzReport(policy_spec, target_name, seed)
    found_by = f"Hypothesis: tokenbudget fuzz --policy {policy_spec} --seed {seed}"
    started = shown = time.perf_counter() - (0.0 if started is None else max(0.0, time.time() - started))
    end = None if ends_by is None else time.perf_counter() + ends_by - time.time()
    startup_deadline, began = min(started + startup_seconds, math.inf if end is None else end), None

    def deadline_now() -> float | None:
        if began is None:
            return startup_deadline
        deadline = min(math.inf if seconds is None else began + seconds, math.inf if end is None else end)
        return None if deadline == math.inf else deadline

    def counts(stats: FuzzStats) -> Tally:
        seen = [c.key for c in report.counterexamples] + [k for k in stats.first_failure if not is_known(k, known)]
        return Tally(report.examples + stats.examples, report.steps + stats.steps,
                     dict(report.coverage + stats.coverage), tuple(dict.fromkeys(seen)),
                     tuple(report.counterexamples), began is not None or stats.began is not None)

    def tick(stats: FuzzStats) -> None:
        nonlocal shown
        now = time.perf_counter()
        if now - shown >= PROGRESS_EVERY:
            shown = now
            elapsed = now - started
            steps = report.steps + stats.steps
            progress(f"{policy_spec}: {elapsed:.0f}s  {report.examples + stats.examples} examples  {steps} steps "
                     f"({steps / max(elapsed, 1e-9):.0f}/s)  {len(report.counterexamples)} violated")
            tally(counts(stats))

    every_kind: dict[str, tuple[FuzzFailure, float, int]] = {}  # every kind any run showed: its first failure

    def reduce_by() -> float | None:
        deadline = deadline_now()
        if reduce_seconds is None:
            return deadline
        return min(deadline or math.inf, time.perf_counter() + reduce_seconds)

    def clock(stats: FuzzStats) -> None:
        """The session's clock after a batch: when fuzzing began, its seconds, start-up's."""
        nonlocal began
        if began is None and stats.began is not None:
            began = stats.began
        now = time.perf_counter()
        report.startup_seconds = (now if began is None else began) - started
        report.seconds = 0.0 if began is None else now - began
        report.startup_exceeded = began is None and now >= startup_deadline

    def finish(reduce: bool = True) -> FuzzReport:
        """The report with a counterexample for every kind seen that none stands for yet
        (shown beside the one raised, or only while shrinking), its trace as found, reduced
        when ``reduce``."""
        reported = {c.key for c in report.counterexamples}
        for kind, (found, first_seen, example) in every_kind.items():
            if kind in reported or is_known(kind, known):
                continue
            counterexample = (_counterexample(found, first_seen, example, seed, target_factory, reduce_by(), judged_gap)
                              if reduce else _as_found(found, first_seen, example, seed))
            report.counterexamples.append(counterexample if corpus is None else save(counterexample, corpus))
        clock(FuzzStats())
        tally(counts(FuzzStats()))
        return report

    batch, size = 0, examples or FIRST_BATCH
    while True:
        stats = FuzzStats(started=started, tick=tick, deadline=deadline_now(), starting=began is None,
                          fuzz_seconds=seconds, end=end,
                          max_examples=None if examples is None else examples - report.examples)
        scratch, judged_gap = None, None
        try:
            cls = machine_class(policy_spec, policy, target_factory, config_strategy, found_by, target_name,
                                max_work_gap=max_work_gap, shapes=shapes, engine=engine, starts=starts)
            cls.stats, judged_gap = stats, cls.max_work_gap
            cls.known, cls.reported = known, frozenset(c.key for c in report.counterexamples)
            scratch = InMemoryExampleDatabase() if database is not None and (cls.known or cls.reported) else None
            batch_database = database if scratch is None else MultiplexedDatabase(ReadOnlyDatabase(database), scratch)
            found = run_machine(cls, size, seed * 100_003 + batch, phases, database=batch_database)
        except KeyboardInterrupt:  # Ctrl-C: the report so far, marked
            report.examples += stats.examples
            report.steps += stats.steps
            report.coverage.update(stats.coverage)
            report.interrupted = True
            _keep_seen(every_kind, stats)
            clock(stats)
            return finish(reduce=False)
        except PolicyError as e:  # the user policy failed outside a target's step: a failure of its own
            found = failure(POLICY_ERROR, (), str(e), Trace(policy_spec, {}, (), description=str(e),
                                                             found_by=found_by))
        report.examples += stats.examples
        report.steps += stats.steps
        report.coverage.update(stats.coverage)
        _keep_seen(every_kind, stats)
        clock(stats)
        if found is not None:
            if scratch is not None:
                for key, values in scratch.data.items():
                    for value in values:
                        database.save(key, value)
            first_seen = stats.first_failure.get(found.identity, time.perf_counter() - started)
            counterexample = _counterexample(found, first_seen, stats.raised_at, seed, target_factory, reduce_by(),
                                             judged_gap)
            report.counterexamples.append(counterexample if corpus is None else save(counterexample, corpus))
        clock(FuzzStats())
        tally(counts(FuzzStats()))
        if found is not None and found.kind == POLICY_ERROR:
            return finish()  # every later example would fail the same way
        if stop_when_found and stop_when_found <= {c.kind for c in report.counterexamples} | \
                {c.key for c in report.counterexamples}:
            return finish()
        batch += 1
        if examples is not None:
            if found is None or report.examples >= examples:
                return finish()
            size = examples - report.examples
        else:
            deadline = deadline_now()
            assert deadline is not None
            if time.perf_counter() >= deadline:
                return finish()
            size = min(2 * size, MAX_BATCH)


def _keep_seen(seen: dict[str, tuple[FuzzFailure, float, int]], stats: FuzzStats) -> None:
    """Add the kinds a batch's runs showed (``FuzzStats.seen``) to the session's, the first of each kept."""
    for kind, (found, example) in stats.seen.items():
        seen.setdefault(kind, (found, stats.first_failure[kind], example))


def _as_found(found: FuzzFailure, first_seen: float, example: int, seed: int) -> Counterexample:
    """The counterexample of a failure as its run found it, neither shrunk nor reduced."""
    return Counterexample(found.kind, found.trace.description or found.kind, found.trace, tuple(found.program),
                          len(found.trace.ops), first_seen, example, seed, identity=found.identity)


def run_machine(cls: type[FuzzMachine], size: int, seed: int, phases: Sequence[Phase] = PHASES,
                parent: settings | None = None, database: ExampleDatabase | None = None) -> FuzzFailure | None:
    """One Hypothesis run of ``size`` examples of ``cls`` from ``seed``, stopping at the
    first failure: that failure (shrunk when ``phases`` shrink) with its program, or None.
    A failure found draining an example Hypothesis cut short (``FuzzStats.cut_short``)
    comes as it was found, without a program: Hypothesis never saw it.
    Nothing is printed; an exception other than a FuzzFailure propagates. ``parent``
    supplies the other settings (a test passes its profile's, whose ``derandomize`` then
    decides the seed); by default the seed does. The example ``database`` is replayed
    first (when ``phases`` reuse) and keeps the failure; None keeps nothing. Phases that
    only replay, with nothing saved, run nothing: None.
    """
    s = settings(
        parent if parent is not None else settings(derandomize=False),
        max_examples=size, database=database, deadline=None, print_blob=False,
        suppress_health_check=list(HealthCheck), report_multiple_bugs=False, phases=tuple(phases),
    )
    try:
        with with_reporter(lambda _: None), seeded_draws():
            cls.aims = Phase.target in s.phases
            run_state_machine_as_test(hypothesis_seed(seed)(cls), settings=s)
    except FuzzFailure as found:
        return _with_program(found)
    except unittest.SkipTest:  # Hypothesis: "no examples to run"
        return None
    except (BudgetSpent, Exception):
        if not cls.stats.stopped:
            raise
        # the budget ran out before any failure (Hypothesis may complain of the example cut
        # short), or a failure Hypothesis dropped ended the run
        return cls.stats.cut_short
    return cls.stats.cut_short


def _with_program(failure: FuzzFailure) -> FuzzFailure:
    """Fill in the program Hypothesis attached to the failure as notes."""
    notes = getattr(failure, "__notes__", [])
    starts = [i for i, line in enumerate(notes) if line.startswith("state = ")]
    if starts:
        program = []
        for line in notes[starts[0]:]:
            program.append(line)
            if line == "state.teardown()":
                break
        failure.program = program
    return failure


def reduce(trace: Trace, kind: str, target_factory: TargetFactory, deadline: float | None = None,
           max_work_gap: int | None = None) -> Trace:
    """The trace with every request, step, abort and accepted entry left out that the
    failure does not need (``spec.shrink``: Hypothesis's shrinking leaves some, such as a
    request added and aborted), judged by replaying on the same target as the machine
    judged (given ``max_work_gap``, a user policy against its base too:
    ``base_gap.replay_judged``). Expectations keep the violated invariants the reduced
    trace still shows; the description is its first violation of ``kind``. Past
    ``deadline`` (perf_counter) it stops reducing. The base replays beside a candidate only
    when ``kind`` is what it judges (``work-conserving``), and beside the reduced trace."""

    wanted, kind = kind, kind_of(kind)
    base_judges_kind = kind == work_conserving.id

    def replayed(candidate: Trace, against_base: bool = base_judges_kind) -> ReplayResult | None:
        bare = replace(candidate, expect=())
        try:
            if max_work_gap is None or not against_base:
                return replay_on_model(bare, target_factory=target_factory)
            return replay_judged(bare, max_work_gap=max_work_gap, target_factory=target_factory)
        except BadInput:
            return None

    def shown(result: ReplayResult | None) -> list[str]:
        if result is None:
            return []
        if kind == POLICY_ERROR:
            return [result.policy_error] if result.policy_error else []
        return [str(v) for v in result.violations if v.invariant == kind and
                (kind not in (MODEL_ERROR, CONFORMANCE) or identity(v) == wanted)]

    reduced = shrink(trace, lambda candidate: bool(shown(replayed(candidate))), deadline=deadline)
    result = replayed(reduced, against_base=True)
    if result is None or not shown(result):  # a user policy that fails only now and then: keep the trace as found
        return trace
    still = {v.invariant for v in result.violations}
    return replace(reduced, description=shown(result)[0], expect=tuple(
        e for e in trace.expect if not isinstance(e, ViolationExpectation) or e.violation in still))


def _counterexample(failure: FuzzFailure, first_seen: float, example: int, seed: int,
                    target_factory: TargetFactory, deadline: float | None = None,
                    max_work_gap: int | None = None) -> Counterexample:
    """The counterexample of a failure, its trace reduced (``reduce``, until ``deadline``;
    ``max_work_gap``: the gap the machine judged against the base, if any)."""
    trace = reduce(failure.trace, failure.identity, target_factory, deadline, max_work_gap)
    if failure.kind == CONFORMANCE:
        trace = _with_engine_side(trace, target_factory)
    return Counterexample(failure.kind, trace.description or failure.kind, trace, tuple(failure.program),
                          len(failure.trace.ops), first_seen, example, seed, identity=failure.identity)


def _with_engine_side(trace: Trace, target_factory: TargetFactory) -> Trace:
    """A ``conformance`` trace with the real engine's side of the step where it parts from
    the model as its expectation (the target's ``expectation``, ``spec.target.Target``), so
    that it replays: on the model it shows the model's side against the engine's."""
    try:
        target = target_factory(BudgetConfig.from_dict(trace.config), get_policy(trace.policy))
        execution = Execution(target)
        for op in trace.ops:
            execution.apply(op)
            if getattr(target, "expectation", None) is not None or execution.crashed is not None:
                break
    except Exception:  # the trace as reduced no longer runs here: keep it as it is
        return trace
    found = getattr(target, "expectation", None)
    return trace if found is None else replace(trace, expect=trace.expect + (found,))


def save(found: Counterexample, corpus: str | Path) -> Counterexample:
    """The counterexample with its trace and program written under ``corpus`` as
    ``<policy>-<kind>-seed<N>[-<n>].json`` and ``.hypothesis.txt``, never overwriting a file."""
    folder = Path(corpus)
    folder.mkdir(parents=True, exist_ok=True)
    policy_spec = found.trace.policy
    stem = f"{''.join(c if c.isalnum() or c in '-_' else '_' for c in policy_spec)}-{found.kind}-seed{found.seed}"
    for n in range(1, 10_000):
        name = stem if n == 1 else f"{stem}-{n}"
        trace_path, program_path = folder / f"{name}.json", folder / f"{name}.hypothesis.txt"
        if program_path.exists():
            continue
        try:
            write_trace(found.trace, trace_path)
        except FileExistsError:
            continue
        with open(program_path, "x", encoding="utf-8") as f:
            f.write(_program_text(found, policy_spec, trace_path.name))
        return replace(found, paths=(str(trace_path), str(program_path)))
    raise FileExistsError(f"{folder}: too many counterexamples named {stem}-*")


def _program_text(found: Counterexample, policy_spec: str, trace_name: str) -> str:
    header = [
        f"# The Hypothesis program that found {found.kind} for {policy_spec}. Its {found.ops_found} ops, "
        f"reduced to {len(found.trace.ops)}, are the trace {trace_name}:",
        f"#   tokenbudget replay {trace_name}",
    ]
    return "\n".join(header + list(found.program)) + "\n"
