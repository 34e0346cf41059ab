"""Fuzzing on several processes: workers on their own seed streams, over the same policies
and target, sharing one example database, merged into one report.

Workers are plain ``multiprocessing`` processes (spawned, so nothing of the parent's state
is shared but what is passed). Each opens the database by the name ``--database`` gave
(``fuzz.database``), runs ``fuzz`` sessions, and sends on one queue what it counts as it
runs and each session's report; the parent merges them: counts add up, and a failure
kind that several workers found is kept once (the one first seen). Workers ignore
SIGINT: the parent decides when they stop. A worker whose parent dies, even by SIGKILL
(which skips the parent's own cleanup), exits at once (``exit_with_parent``). A worker that
has built no target when the job's start-up cap has passed is stopped and left out: its
start-up hung.
"""
from __future__ import annotations

import hashlib
import multiprocessing
import multiprocessing.connection
import os
import pickle
import queue
import signal
import threading
import time
from collections import Counter
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Callable, Collection, Iterator, Sequence

from ..model.target import TargetFactory
from ..spec.trace import Trace
from .database import open_database
from .session import PROGRESS_EVERY, STARTUP_SECONDS, Counterexample, FuzzReport, Tally, fuzz

Event = tuple[Any, ...]
CONTEXT = multiprocessing.get_context("spawn")


def stream_seed(seed: int, worker: int, round: int = 0) -> int:
    """The seed of a worker's round of sessions: ``seed`` itself for worker 0's first
    round (so one worker fuzzes as a plain session does), else one derived from all three."""
    if worker == 0 and round == 0:
        return seed
    return int.from_bytes(hashlib.sha256(f"{seed}/{worker}/{round}".encode()).digest()[:4], "big")


@dataclass(frozen=True)
class Job:
    """What every worker fuzzes: the policies in turn, each for ``examples`` or ``seconds``
    (on each worker, from its first example), on the target ``target_factory`` makes, with
    the example database named ``database``; a user policy judged against its base by
    ``max_work_gap`` (``fuzz``). Start-up (spawning, importing, building the first target),
    counted from ``started`` when given, may last ``startup_seconds``."""

    policies: tuple[str, ...]
    target_factory: TargetFactory
    target_name: str
    examples: int | None
    seconds: float | None
    seed: int
    database: str
    started: float | None = None  # time.time() the command started: each policy's seconds count from it
    max_work_gap: int | None = None  # None: no work gap judged
    startup_seconds: float = STARTUP_SECONDS
    engine: str = ""  # a real engine's release and folder, which keys the saved examples
    starts: tuple[Trace, ...] = ()  # traces one run in two starts from (``fuzz.trace_starts``)


@dataclass
class Live:
    """The merged counts of every worker so far; ``found`` holds each (policy, kind) once."""

    workers: int
    started: float = field(default_factory=time.perf_counter)
    examples: int = 0
    steps: int = 0
    coverage: Counter[str] = field(default_factory=Counter)
    found: dict[tuple[str, str], None] = field(default_factory=dict)

    @property
    def seconds(self) -> float:
        return time.perf_counter() - self.started

    def violations(self) -> Counter[str]:
        """Per violated invariant, the policies it was found in."""
        return Counter(kind for _, kind in self.found)

    def add(self, policy: str, delta: Tally) -> None:
        self.examples += delta.examples
        self.steps += delta.steps
        self.coverage.update(delta.coverage)
        for kind in delta.violations:
            self.found.setdefault((policy, kind), None)


class Sender:
    """A worker's side of the queue: turns a session's running Tally into deltas (each
    counterexample sent once, as soon as it is shrunk)."""

    def __init__(self, events: Any, worker: int, policy: str) -> None:
        self.events, self.worker, self.policy = events, worker, policy
        self.last = Tally(0, 0, {}, ())

    def __call__(self, now: Tally) -> None:
        last = self.last
        delta = Tally(now.examples - last.examples, now.steps - last.steps,
                      dict(Counter(now.coverage) - Counter(last.coverage)),
                      tuple(k for k in now.violations if k not in last.violations),
                      now.counterexamples[len(last.counterexamples):], began=now.began)
        self.last = now
        self.events.put(("tally", self.worker, self.policy, delta))


def start_workers(target: Callable[..., None], args: Sequence[tuple[Any, ...]]) -> tuple[Any, list[Any]]:
    """One spawned process per argument tuple, running ``target(*args, events)``; the events queue and them."""
    events = CONTEXT.Queue()
    processes = [CONTEXT.Process(target=target, args=(*a, events), daemon=True) for a in args]
    for process in processes:
        process.start()
    return events, processes


class WorkerDied(RuntimeError):
    """A worker process ended without a word: killed, or crashed in C code."""

    def __init__(self, worker: int, exitcode: int | None) -> None:
        how = f"killed by signal {-exitcode}" if exitcode is not None and exitcode < 0 else f"exit status {exitcode}"
        super().__init__(f"fuzz worker {worker} died ({how})")
        self.worker, self.exitcode = worker, exitcode


def receive(events: Any, processes: list[Any], timeout: float = PROGRESS_EVERY,
            abandoned: Collection[int] = ()) -> Iterator[Event | None]:
    """The workers' events until each said ``done`` or is in ``abandoned`` (which the caller
    may add to as it goes); None when nothing came for ``timeout`` seconds. A worker's
    ``error`` is raised here; a worker that died without a word is ``WorkerDied``."""
    running = set(range(len(processes)))
    while running - set(abandoned):
        try:
            event = _get_whole(events, timeout)
        except queue.Empty:
            dead = [w for w in running if w not in abandoned and not processes[w].is_alive()]
            if dead and events.empty():
                raise WorkerDied(dead[0], processes[dead[0]].exitcode) from None
            yield None
            continue
        if event[0] == "done":
            running.discard(event[1])
        elif event[0] == "error":
            raise event[2]
        else:
            yield event


def _get_whole(events: Any, timeout: float) -> Event:
    """``events.get(timeout=timeout)`` with a Ctrl-C held until the get returns: a
    KeyboardInterrupt raised inside the read can leave half an event in the pipe, and the
    next read (``drain``) then takes its bytes for a length and waits forever."""
    with sigint_held():
        return events.get(timeout=timeout)


@contextmanager
def sigint_held() -> Iterator[None]:
    """Run the block with a Ctrl-C held until it ends, then hand the held signal to the
    handler that was in place (KeyboardInterrupt by default). For code a KeyboardInterrupt
    would break half-way, or that loses one (drawing a plot lost it: the command went on).
    Outside the main thread, where no signal arrives, the block just runs."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    held: list[int] = []
    previous = signal.signal(signal.SIGINT, lambda signum, _: held.append(signum))
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
        if held and callable(previous):
            previous(signal.SIGINT, None)


def drain(events: Any, most: int = 100_000) -> list[Event]:
    """The events already queued (the workers still running: a worker stopped while writing
    one could leave half an event), without waiting; ``done`` and ``error`` left out."""
    out: list[Event] = []
    for _ in range(most):
        try:
            event = events.get_nowait()
        except queue.Empty:
            break
        if event[0] not in ("done", "error"):
            out.append(event)
    return out


def stop_workers(processes: list[Any]) -> None:
    for process in processes:
        if process.is_alive():
            process.terminate()
    for process in processes:
        process.join(timeout=10)


ORPHANED = 3  # a worker's exit status when its parent died first


def exit_with_parent() -> None:
    """In a worker: end this process as soon as its parent is gone. A daemonic worker is
    ended by its parent's normal exit, not by a SIGKILL, after which it would fuzz on at full
    CPU until its deadline. A thread waits on the parent's sentinel (readable once the parent
    has died) and exits at once: the worker's reports have nobody left to go to."""
    parent = multiprocessing.parent_process()
    assert parent is not None, "called outside a worker"

    def watch() -> None:
        multiprocessing.connection.wait([parent.sentinel])
        os._exit(ORPHANED)

    threading.Thread(target=watch, name="exit-with-parent", daemon=True).start()


def worker_errors(events: Any, worker: int) -> Callable[[BaseException], None]:
    """How a worker hands an exception to the parent (as itself when it pickles)."""
    def send(error: BaseException) -> None:
        try:
            pickle.dumps(error)
        except Exception:
            error = RuntimeError(f"{type(error).__name__}: {error}")
        events.put(("error", worker, error))
    return send


def _fuzz_worker(job: Job, worker: int, events: Any) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    exit_with_parent()
    try:
        database = open_database(job.database)
        seed = stream_seed(job.seed, worker)
        for index, policy in enumerate(job.policies):
            report = fuzz(policy, target_factory=job.target_factory, target_name=job.target_name,
                          examples=job.examples, seconds=job.seconds, seed=seed, database=database,
                          tally=Sender(events, worker, policy), max_work_gap=job.max_work_gap,
                          startup_seconds=job.startup_seconds, started=job.started if index == 0 else None,
                          engine=job.engine, starts=job.starts)
            events.put(("report", worker, report))
    except BaseException as e:
        worker_errors(events, worker)(e)
    events.put(("done", worker))


def fuzz_workers(job: Job, workers: int, live: Callable[[Live], None] = lambda _: None) -> list[FuzzReport]:
    """Fuzz ``job`` on ``workers`` processes; one merged report per policy, in order, its
    counterexamples not saved (``session.save`` them). ``live`` hears the merged counts
    about every PROGRESS_EVERY seconds. A KeyboardInterrupt ends it with the reports of the
    policies every worker finished, then one marked ``interrupted`` holding what the
    workers' tallies told of the policy running (counts and counterexamples up to their
    last tally). A worker that built no target within the job's start-up cap is stopped
    and left out (``abandon_hung``); a policy no worker reported on is an empty report,
    ``startup_exceeded``."""
    assert workers >= 1
    counts = Live(workers)
    reports: dict[str, list[FuzzReport]] = {p: [] for p in job.policies}
    told = {p: FuzzReport(p, job.target_name, job.seed) for p in job.policies}  # the tallies, added up
    began: set[int] = set()
    abandoned: set[int] = set()
    startup_ends = (job.started or time.time()) + job.startup_seconds

    def handle(event: Event) -> None:
        if event[0] == "tally":
            counts.add(event[2], event[3])
            _add_tally(told[event[2]], event[3])
            if event[3].began:
                began.add(event[1])
        elif event[0] == "report":
            reports[event[2].policy].append(event[2])
            began.add(event[1])

    interrupted = False
    events, processes = start_workers(_fuzz_worker, [(job, w) for w in range(workers)])
    try:
        try:
            for event in receive(events, processes, abandoned=abandoned):
                if event is not None:
                    handle(event)
                abandon_hung(processes, began, abandoned, startup_ends)
                live(counts)
        except KeyboardInterrupt:
            interrupted = True
            for event in drain(events):
                handle(event)
    finally:
        stop_workers(processes)
    if not interrupted:
        return [merge(reports[p]) if reports[p] else _never_started(job, p) for p in job.policies]
    done = []
    for policy in job.policies:
        if len(reports[policy]) < workers:
            partial = told[policy]
            partial.seconds, partial.interrupted = counts.seconds, True
            partial.counterexamples = _earliest_per_kind(partial.counterexamples)
            return done + [partial]
        done.append(merge(reports[policy]))
    done[-1].interrupted = True
    return done


def abandon_hung(processes: list[Any], began: Collection[int], abandoned: set[int], startup_ends: float) -> None:
    """Past ``startup_ends`` (``time.time()``), stop every worker that has not ``began``
    (built a target) and add it to ``abandoned``."""
    if time.time() < startup_ends:
        return
    for worker, process in enumerate(processes):
        if worker not in began and worker not in abandoned:
            process.terminate()
            abandoned.add(worker)


def _never_started(job: Job, policy: str) -> FuzzReport:
    """The report on a policy whose every worker was stopped in its start-up: nothing ran."""
    report = FuzzReport(policy, job.target_name, job.seed, startup_exceeded=True)
    report.startup_seconds = time.time() - job.started if job.started is not None else job.startup_seconds
    return report


def _add_tally(report: FuzzReport, delta: Tally) -> None:
    report.examples += delta.examples
    report.steps += delta.steps
    report.coverage.update(delta.coverage)
    report.counterexamples.extend(delta.counterexamples)


def _earliest_per_kind(found: Sequence[Counterexample]) -> list[Counterexample]:
    """Each failure identity once, its earliest counterexample, in the order they were first seen."""
    ordered = sorted(found, key=lambda c: c.first_seen)
    return sorted({c.key: c for c in reversed(ordered)}.values(), key=lambda c: c.first_seen)


def merge(reports: Sequence[FuzzReport]) -> FuzzReport:
    """Several workers' reports on one policy as one: counts added, seconds the longest,
    each failure kind once (the earliest seen)."""
    first = reports[0]
    merged = FuzzReport(first.policy, first.target, first.seed)
    for r in reports:
        merged.examples += r.examples
        merged.steps += r.steps
        merged.seconds = max(merged.seconds, r.seconds)
        merged.startup_seconds = max(merged.startup_seconds, r.startup_seconds)
        merged.startup_exceeded = merged.startup_exceeded or r.startup_exceeded
        merged.coverage.update(r.coverage)
    merged.counterexamples = _earliest_per_kind([c for r in reports for c in r.counterexamples])
    return merged
