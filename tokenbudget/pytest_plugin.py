"""The pytest plugin: run any test suite that builds vLLM schedulers (vLLM's own, yours) with
every ``schedule()`` judged by tokenbudget's invariants (``tokenbudget.monitor``).

    pytest --tokenbudget=report tests/v1/core      # judge, report, change no outcome
    pytest --tokenbudget=strict tests/v1/core      # a test whose scheduler broke an invariant fails
    pytest --tokenbudget=report --tokenbudget-out judged.jsonl ...

Registered as the ``tokenbudget`` pytest11 entry point; inert (no import) without
``--tokenbudget``. With it, each test runs inside a monitor's ``watching()`` block, and the
terminal summary gives the tests, schedulers, steps judged, the scope of what was not
judged and why, every violation with its step, and apart the known ones (a finding of
vLLM's explains each; strict fails none). ``--tokenbudget-out`` writes one JSON line per
test that built a scheduler: its id, counts, violations and known ones with their records
(under pytest-xdist, each worker judges its tests and writes ``FILE.<worker>``).
"""
from __future__ import annotations

import json
from dataclasses import asdict
from typing import Any, Iterator, Optional

import pytest

MODES = ("report", "strict")


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("tokenbudget", "judge vLLM's schedulers by tokenbudget's invariants")
    group.addoption("--tokenbudget", choices=MODES, default=None,
                    help="report: judge every vLLM Scheduler the tests build and report violations; "
                         "strict: also fail the test whose scheduler broke an invariant")
    group.addoption("--tokenbudget-out", metavar="FILE.jsonl", default=None,
                    help="write one JSON line per test that built a scheduler (needs --tokenbudget)")


def pytest_configure(config: pytest.Config) -> None:
    mode = config.getoption("--tokenbudget")
    if mode is None:
        if config.getoption("--tokenbudget-out"):
            raise pytest.UsageError("--tokenbudget-out needs --tokenbudget=report or --tokenbudget=strict")
        return
    out = config.getoption("--tokenbudget-out")
    worker = getattr(config, "workerinput", {}).get("workerid")  # a pytest-xdist worker: a file of its own
    if out and worker:
        out = f"{out}.{worker}"
    config.pluginmanager.register(TokenbudgetSession(mode, out), "tokenbudget-session")


class TokenbudgetSession:
    """The plugin's state when enabled: one monitor for the session, the tests it judged."""

    def __init__(self, mode: str, out: Optional[str]) -> None:
        self.mode, self.out_path = mode, out
        self.monitor: Any = None
        self.unavailable: Optional[str] = None
        self.tests = 0
        self.tests_with_schedulers = 0
        self.failed_by_plugin: list[str] = []
        self.out = open(out, "w", buffering=1) if out else None  # a line per test, as it ends

    def _monitor(self) -> Any:
        if self.monitor is None and self.unavailable is None:
            from .harness.vllm.engine import EngineUnavailable
            from .harness.vllm.monitor import scheduler_class
            from .monitor import Monitor
            try:
                scheduler_class()
            except EngineUnavailable as exc:
                self.unavailable = str(exc)
                return None
            self.monitor = Monitor()
        return self.monitor

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_protocol(self, item: pytest.Item, nextitem: Any) -> Iterator[None]:
        monitor = self._monitor()
        if monitor is None:
            return (yield)
        self.tests += 1
        monitor.context = item.nodeid
        before = (monitor.stats.schedulers, monitor.stats.steps, len(monitor.violations), len(monitor.known),
                  monitor.stats.encoder_steps)
        item.stash[_BEFORE] = before
        with monitor.watching():
            result = yield
        monitor.context = None
        schedulers = monitor.stats.schedulers - before[0]
        if schedulers:
            self.tests_with_schedulers += 1
            if self.out is not None:
                found = monitor.violations[before[2]:]
                self.out.write(json.dumps({"test": item.nodeid, "schedulers": schedulers,
                                           "steps": monitor.stats.steps - before[1],
                                           "encoder_steps": monitor.stats.encoder_steps - before[4],
                                           "violations": [_violation_json(v) for v in found],
                                           "known": [{**_violation_json(v), "finding": v.finding}
                                                     for v in monitor.known[before[3]:]]}) + "\n")
        return result

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_call(self, item: pytest.Item) -> Iterator[None]:
        """Strict: a passing test whose scheduler broke an invariant fails. A test that fails
        for its own reason keeps its failure, and its report gets the violations with their
        step records (a section "tokenbudget"), in either mode."""
        try:
            result = yield
        except BaseException:
            found = self._found(item)
            if found:
                item.add_report_section("call", "tokenbudget", "the test's scheduler broke an invariant\n"
                                        + _describe(found))
            raise
        found = self._found(item)
        if self.mode == "strict" and found:
            self.failed_by_plugin.append(item.nodeid)
            pytest.fail("tokenbudget: the test's scheduler broke an invariant\n" + _describe(found), pytrace=False)
        return result

    def _found(self, item: pytest.Item) -> list[Any]:
        """The violations judged since the test began."""
        return [] if self.monitor is None else self.monitor.violations[item.stash[_BEFORE][2]:]

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        write = terminalreporter.write_line
        terminalreporter.section("tokenbudget")
        if self.unavailable is not None:
            write(f"nothing judged: {self.unavailable}")
            return
        monitor = self.monitor
        if monitor is None:
            write("nothing judged here: no test ran in this process (under pytest-xdist the workers judge, strict "
                  "fails their tests, and --tokenbudget-out FILE gets one FILE.<worker> each)")
            return
        stats = monitor.stats
        write(f"{self.tests} tests, {self.tests_with_schedulers} built a vLLM scheduler: {stats.schedulers} "
              f"schedulers, {stats.steps} steps judged ({stats.encoder_steps} with encoder inputs), "
              f"{stats.outputs_applied} outputs applied, "
              f"{stats.preempted_outside_a_pass} preemptions outside a pass; judging took {stats.seconds:.2f} s")
        write("scope (not judged, schedulers):")
        for line, count in sorted(stats.exclusions.items()):
            write(f"  {line}: {count}")
        if stats.kv_groups:
            write("KV cache groups judged one by one (schedulers):")
            for line, count in sorted(stats.kv_groups.items()):
                write(f"  {line}: {count}")
        if monitor.known:
            write(f"known (a finding of vLLM's explains each; strict fails none): {len(monitor.known)}")
            for v in monitor.known[:20]:
                write(f"  {v.context}: {v}")
        write(f"violations: {len(monitor.violations)}" + (f" (tests failed by strict: {len(self.failed_by_plugin)})"
                                                          if self.mode == "strict" else ""))
        for v in monitor.violations[:50]:
            write(f"  {v.context}: {v}")
        if len(monitor.violations) > 50:
            write(f"  ... {len(monitor.violations) - 50} more")
        if self.out_path:
            write(f"written: {self.out_path}")

    def pytest_unconfigure(self, config: pytest.Config) -> None:
        if self.out is not None:
            self.out.close()


_BEFORE = pytest.StashKey[tuple[int, int, int, int]]()


def _describe(found: list[Any]) -> str:
    lines = []
    for v in found[:10]:
        lines.append(str(v))
        if v.record is not None:
            lines.append("  step: " + json.dumps(_record_json(v.record)))
    return "\n".join(lines)


def _violation_json(v: Any) -> dict[str, object]:
    doc: dict[str, object] = {"scheduler": v.label, "invariant": v.violation.invariant, "step": v.violation.step,
                              "message": v.violation.message}
    if v.record is not None:
        doc["record"] = _record_json(v.record)
    return doc


def _record_json(rec: Any) -> dict[str, object]:
    """A StepRecord as JSON: its fields less the state fingerprint, queues as lists."""
    doc = {k: v for k, v in asdict(rec).items() if k not in ("fingerprint", "block_keys")}
    doc["waiting"], doc["running"] = list(rec.waiting), list(rec.running)
    doc["padded"], doc["prefill"] = sorted(rec.padded), sorted(rec.prefill)
    doc["paused"] = sorted(rec.paused)
    doc["block_keys"] = sorted(rec.block_keys)
    return json.loads(json.dumps(doc, default=str))
