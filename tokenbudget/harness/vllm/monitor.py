"""A runtime monitor for vLLM's scheduler: attach it to a live ``Scheduler`` (or watch every
one built inside a ``with`` block) and each ``schedule()`` is judged by the spec's
invariants as it happens, whoever drives the scheduler (vLLM's own tests, an engine, a
script)."""
from __future__ import annotations

import contextlib
import itertools
import time
from collections import Counter
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Iterator, Optional

from ...model import methods
from ...model.vllm.versions import VLLM_VERSIONS, nearest_version
from ...spec.invariants import STEP_CHECKS, RequestAccounting, Violation
from ...spec.records import StepLimits, StepRecord
from . import observe
from .engine import EngineUnavailable, not_importable
from .known import live_finding
from .preemptions import PreemptionRecorder

RUN_HALF = "progress (run half)"
RUN_HALF_WHY = "a test drives the scheduler by hand: a repeated state or a long drain is no deadlock of vLLM's"


@dataclass(frozen=True)
class MonitorViolation:
    """An invariant a watched scheduler broke: which scheduler (``label``), the violation,
    the record of its step (None for a breach found when an output was applied), and the
    ``context`` the monitor was in (the pytest plugin sets the test's id)."""

    label: str
    violation: Violation
    record: Optional[StepRecord]
    context: Optional[str] = None
    finding: Optional[str] = None  # the id of the finding that explains it (SPEC.md §6), if one does

    def __str__(self) -> str:
        return f"{self.label}: {self.violation}" + (f" (known: {self.finding})" if self.finding else "")


@dataclass
class MonitorStats:
    schedulers: int = 0
    steps: int = 0
    outputs_applied: int = 0
    preempted_outside_a_pass: int = 0
    encoder_steps: int = 0  # steps that encoded or read an encoder input
    seconds: float = 0.0  # spent observing and judging, the scheduler's own calls left out
    exclusions: Counter[str] = field(default_factory=Counter)  # "invariant: why" -> schedulers
    kv_groups: Counter[str] = field(default_factory=Counter)  # "kind + kind" judged one by one -> schedulers


class Monitor:
    """Judges the schedulers attached to it; ``violations`` lists what they broke, in order,
    that no finding explains, ``known`` what a finding of vLLM's does (``known.live_finding``).
    ``context`` is stamped on each violation found from then on."""

    def __init__(self) -> None:
        self.violations: list[MonitorViolation] = []
        self.known: list[MonitorViolation] = []
        self.stats = MonitorStats()
        self.context: Optional[str] = None
        self._labels = itertools.count()

    def attach(self, sched: Any) -> SchedulerWatch:
        """Watch ``sched`` from now on (requests it already holds are adopted as live)."""
        watch = SchedulerWatch(self, sched, f"{observe.scheduler_kind(sched)}#{next(self._labels)}")
        self.stats.schedulers += 1
        for line in watch.scope_lines():
            self.stats.exclusions[line] += 1
        kinds = [group.kind for _, group in observe.judged_groups(sched)]
        if kinds:
            self.stats.kv_groups[" + ".join(kinds)] += 1
        return watch

    @contextlib.contextmanager
    def watching(self) -> Iterator[Monitor]:
        """Attach every vLLM ``Scheduler`` (subclasses included) built inside the block.
        Raises EngineUnavailable when vLLM does not import. vLLM is imported as it is: its
        logging and environment are left alone (a test may assert on vLLM's warnings)."""
        Scheduler = scheduler_class()

        original = Scheduler.__init__
        monitor = self

        def watched_init(sched: Any, *args: Any, **kwargs: Any) -> None:
            original(sched, *args, **kwargs)
            monitor.attach(sched)

        Scheduler.__init__ = watched_init  # type: ignore[method-assign]
        try:
            yield self
        finally:
            Scheduler.__init__ = original  # type: ignore[method-assign]

    def _found(self, label: str, violations: list[Violation], record: Optional[StepRecord], sched: Any) -> None:
        from vllm import __version__ as release
        for v in violations:
            finding = live_finding(sched, release, v, record)
            (self.known if finding else self.violations).append(
                MonitorViolation(label, v, record, self.context, finding.id if finding else None))


def scheduler_class() -> Any:
    """vLLM's ``Scheduler`` class, imported without touching vLLM's logging or environment
    (unlike the harness's engine, which quiets vLLM); EngineUnavailable when it does not import."""
    try:
        from vllm.v1.core.sched.scheduler import Scheduler
    except Exception as exc:  # ImportError, or a broken install failing at import
        raise not_importable(exc) from None
    return Scheduler


def attach(sched: Any, monitor: Optional[Monitor] = None) -> Monitor:
    """Watch one live scheduler; the monitor (a new one unless given) collects its violations."""
    monitor = monitor or Monitor()
    monitor.attach(sched)
    return monitor


@contextlib.contextmanager
def watch() -> Iterator[Monitor]:
    """``with watch() as monitor:`` judges every Scheduler built in the block; read
    ``monitor.violations`` after it (or during)."""
    with Monitor().watching() as monitor:
        yield monitor


def physical_limits(sched: Any, observed: StepLimits) -> StepLimits:
    """The scheduler's limits with d and L from our method table (``model.methods``, at the
    modelled version nearest to the vLLM driven) where it has the method, vLLM's own
    lookahead kept as the one it reserves: a slip in vLLM's own counts would hide in its
    numbers. A method our table lacks keeps vLLM's d and L."""
    spec = sched.vllm_config.speculative_config
    if spec is None or observed.method is None:
        return observed
    from vllm import __version__ as release
    table = VLLM_VERSIONS[nearest_version(release)].table
    if observed.method not in methods.TABLES[table]:
        return observed
    k, parallel = observed.num_speculative_tokens, bool(getattr(spec, "parallel_drafting", False))
    return replace(observed, draft_slots=int(methods.draft_slots(table, observed.method, k, parallel)),
                   lookahead=int(methods.lookahead(table, observed.method, k)), reserved_lookahead=observed.lookahead)


class SchedulerWatch:
    """One watched scheduler: its limits and scope, its request accounting, and the steps
    scheduled whose outputs have not been applied yet."""

    def __init__(self, monitor: Monitor, sched: Any, label: str) -> None:
        self.monitor, self.sched, self.label = monitor, sched, label
        self.limits = physical_limits(sched, observe.limits(sched))
        self.scope = observe.scope(sched)
        self.checks = tuple(inv for inv in STEP_CHECKS if self.scope.applies(inv.id))
        self.progress_why_not = observe.progress_judged(sched)
        self.judges_progress = self.progress_why_not is None
        self.accounting = RequestAccounting()
        self.requests: dict[str, Any] = {}  # every request added, by id: a finish inside vLLM is read off it
        self.pending: dict[int, tuple[Any, int, dict[str, Any], tuple[str, ...]]] = {}  # id(output) -> its step
        self.encoder_held: set[str] = set()  # the keys of the encoder outputs the runner holds
        self.encoder_seen: set[str] = set()  # the keys in the scheduler's encoder cache after the last pass
        self.num_steps = 0
        self.runs_async = observe.scheduler_kind(sched) == "AsyncScheduler"
        self.worker_keeps_drafts = bool(getattr(sched, "use_v2_model_runner", True))  # scheduler.py:363 (vLLM 0.32.0)
        self.sampled_last: frozenset[str] = frozenset()  # what the pass before sampled: the V1 worker has their drafts
        for rid, request in sched.requests.items():
            self._adopt(rid, request)
        self._wrap("schedule", self._schedule)
        self._wrap("update_from_output", self._update_from_output)
        self._wrap("add_request", self._add_request)
        self._wrap("finish_requests", self._finish_requests)
        self._wrap("reset_encoder_cache", self._reset_encoder_cache)
        self.preemptions = PreemptionRecorder(sched, self._preempted)

    def scope_lines(self) -> list[str]:
        lines = [*self.scope.lines(), f"{RUN_HALF}: not judged ({RUN_HALF_WHY})"]
        if self.progress_why_not is not None:
            lines.append(f"progress (step half): not judged ({self.progress_why_not})")
        return lines

    def _wrap(self, name: str, wrapper: Callable[..., Any]) -> None:
        original = getattr(self.sched, name)
        setattr(self.sched, name, lambda *args, **kwargs: wrapper(original, *args, **kwargs))

    def _adopt(self, rid: str, request: Any) -> None:
        self.requests[rid] = request
        self.accounting.add(rid)
        state = observe.request_state(request)
        if state.status in ("finished", "aborted"):
            self.accounting.ended(rid, state.status)

    def _add_request(self, original: Callable[..., Any], request: Any, *args: Any, **kwargs: Any) -> Any:
        result = original(request, *args, **kwargs)
        rid = request.request_id
        self._adopt(rid, self.sched.requests.get(rid, request))
        return result

    def _finish_requests(self, original: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        result = original(*args, **kwargs)
        for request in result or ():
            state = observe.request_state(request)
            if state.status in ("finished", "aborted"):
                self.accounting.ended(request.request_id, state.status)
        return result

    def _reset_encoder_cache(self, original: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        self.encoder_held.clear()  # the engine resets the runners' encoder caches with the scheduler's
        return original(*args, **kwargs)

    def _preempted(self, rid: str, in_pass: bool) -> None:
        if not in_pass:
            self.monitor.stats.preempted_outside_a_pass += 1
        self.accounting.preempted(rid)

    def _schedule(self, original: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        started = time.perf_counter()
        sched, index, stats = self.sched, self.num_steps, self.monitor.stats
        self.num_steps += 1
        stats.steps += 1
        possible = observe.progress_possible(sched, self.limits) if self.judges_progress else None
        running_before = [r.request_id for r in sched.running] if self.runs_async else ()
        self.encoder_held |= observe.encoder_cache_keys(sched) - self.encoder_seen  # put there by hand: taken as encoded
        self.limits = observe.with_encoder_limits(self.limits, sched)
        self.preemptions.start()
        called = time.perf_counter()
        try:
            out = original(*args, **kwargs)
        except Exception as exc:
            preempted = self.preemptions.stop()
            returned = time.perf_counter()
            record = observe.error_record(index, self.limits, sched, preempted, exc)
            self._judge(record)
            stats.seconds += called - started + time.perf_counter() - returned
            raise
        preempted = self.preemptions.stop()
        returned = time.perf_counter()
        self.encoder_held.difference_update(out.free_encoder_mm_hashes)  # the runner frees them before the step
        record = observe.step_record(index, self.limits, sched, out, preempted, possible=possible,
                                     encoder_held=self.encoder_held)
        if self.runs_async:
            record = observe.async_record(record, out, running_before, self.sampled_last, self.worker_keeps_drafts)
            self.sampled_last = observe.samples(sched, out)
        if record.encoder_inputs:
            stats.encoder_steps += 1
            self.encoder_held.update(e.key for e in record.encoder_inputs if e.scheduled)
        self.encoder_seen = observe.encoder_cache_keys(sched)
        self.pending[id(out)] = (out, index, observe.scheduled_requests(sched, out, preempted), preempted)
        self._judge(record)
        stats.seconds += called - started + time.perf_counter() - returned
        return out

    def _judge(self, record: StepRecord) -> None:
        self._ended_inside_vllm()
        found = [v for inv in self.checks for v in inv(record)]
        found += [Violation("no-request-lost", step, message) for step, message in self.accounting.queued(record)]
        if found:
            self.monitor._found(self.label, found, record, self.sched)

    def _ended_inside_vllm(self) -> None:
        """Live requests vLLM finished where no wrapped method saw it (a length cap inside
        ``schedule()``, a connector's failure): read off their Request objects."""
        for rid in list(self.accounting.live):
            request = self.requests.get(rid)
            if request is not None and request.is_finished():
                self.accounting.ended(rid, observe.request_state(request).status)

    def _update_from_output(self, original: Callable[..., Any], out: Any, *args: Any, **kwargs: Any) -> Any:
        step = self.pending.pop(id(out), None)
        if step is None or step[0] is not out:  # an output the test built by hand: its requests as they are now
            requests = {rid: r for rid in out.num_scheduled_tokens if (r := self.sched.requests.get(rid))}
            step = (out, self.num_steps - 1, requests, ())
        result = original(out, *args, **kwargs)
        returned = time.perf_counter()
        _, index, requests, preempted = step
        self.monitor.stats.outputs_applied += 1
        outcome = observe.outcome(index, requests, preempted)
        self.accounting.engine_aborted(outcome)
        late = ({rid: len(d) for rid, d in out.scheduled_spec_decode_tokens.items()}
                if self.runs_async else None)
        breaches = self.accounting.applied(index, outcome, late)
        if breaches:
            self.monitor._found(self.label, [Violation("no-request-lost", s, m) for s, m in breaches], None, self.sched)
        self.monitor.stats.seconds += time.perf_counter() - returned
        return result
