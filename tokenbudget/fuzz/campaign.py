"""A campaign: fuzzing for hours on several processes, resumable, reported as it goes.

A campaign lives in one folder: ``state.json`` (where each worker's seed stream is, the
counts, the violations found and the counts over time), ``report.json`` and
``report.png`` (rewritten about every ``report_every`` seconds and at the end), and
``corpus/`` (one trace per policy and violated invariant). Each worker fuzzes in rounds
of ROUND_SECONDS: worker w's round r fuzzes policy (r + w) mod P with seed
``stream_seed(seed, w, r)``, searching only for the kinds not yet found for that policy.
It ends when the campaign's hours are spent (the time of every run added up: workers
still busy then, shrinking a failure say, are stopped; what they found is in the example
database, replayed first next time) or on KeyboardInterrupt, either way with its state
and report written. Run again in the same folder it continues each worker after its last
round begun, and the counts.
"""
from __future__ import annotations

import json
import os
import signal
import time
from collections import Counter
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, Callable, Sequence

from ..model.target import TargetFactory
from .coverage import steps_per_path
from .database import open_database
from .parallel import (CONTEXT, Event, Live, Sender, drain, exit_with_parent, receive, sigint_held, start_workers,
                       stop_workers, stream_seed, worker_errors)
from .session import Counterexample, fuzz, save

ROUND_SECONDS = 60.0  # one worker's session on one policy, at most
REPORT_EVERY = 60.0  # seconds between reports, at most (a short campaign reports more often)
MIN_REPORT_EVERY = 5.0  # and at least: drawing the plot takes a while


@dataclass
class CampaignState:
    """What a campaign folder remembers between runs (``state.json``)."""

    seed: int
    seconds: float = 0.0  # spent by every run so far
    examples: int = 0
    steps: int = 0
    coverage: dict[str, int] = field(default_factory=dict)
    rounds: dict[str, int] = field(default_factory=dict)  # worker -> its next round
    violations: list[dict[str, Any]] = field(default_factory=list)
    history: list[dict[str, Any]] = field(default_factory=list)

    def known(self, policy: str) -> frozenset[str]:
        return frozenset(v["kind"] for v in self.violations if v["policy"] == policy)


@dataclass(frozen=True)
class Campaign:
    """What to fuzz, for how long, and where the campaign's folder is."""

    folder: Path
    hours: float
    policies: tuple[str, ...]
    target_factory: TargetFactory
    target_name: str
    workers: int
    database: str
    seed: int = 0
    max_work_gap: int = 0  # tokens a user policy may leave undone beyond its base in a step
    engine: str = ""  # a real engine's release and folder, which keys the saved examples

    @property
    def corpus(self) -> Path:
        return self.folder / "corpus"


def load_state(folder: Path, seed: int) -> CampaignState:
    """The folder's state, or a new one (with ``seed``) when it has none."""
    path = folder / "state.json"
    if not path.exists():
        return CampaignState(seed)
    return CampaignState(**json.loads(path.read_text()))


def _write(path: Path, text: str) -> None:
    part = path.with_name(path.name + ".part")
    part.write_text(text)
    os.replace(part, path)


def report_json(campaign: Campaign, state: CampaignState, running: bool) -> dict[str, Any]:
    return {
        "running": running, "hours": campaign.hours, "seconds": round(state.seconds, 1),
        "policies": list(campaign.policies), "target": campaign.target_name, "workers": campaign.workers,
        "database": campaign.database, "max_work_gap": campaign.max_work_gap, "seed": state.seed,
        "examples": state.examples, "steps": state.steps,
        "steps_per_second": round(state.steps / state.seconds, 1) if state.seconds else 0.0,
        "coverage": state.coverage, "violations": state.violations, "corpus": str(campaign.corpus),
        "plot": str(campaign.folder / "report.png"), "history": state.history,
    }


def write_report(campaign: Campaign, state: CampaignState, running: bool) -> None:
    """state.json, report.json and report.png, each replaced whole; a Ctrl-C meanwhile
    takes effect once all three are written."""
    from .campaign_plot import plot  # matplotlib: loaded by run_campaign before anything can be interrupted

    with sigint_held():
        campaign.folder.mkdir(parents=True, exist_ok=True)
        _write(campaign.folder / "state.json", json.dumps(asdict(state), indent=1))
        _write(campaign.folder / "report.json", json.dumps(report_json(campaign, state, running), indent=1))
        plot(state.history, campaign.folder / "report.png")


def _campaign_worker(campaign: Campaign, worker: int, first_round: int, deadline: float, inbox: Any,
                     known: dict[str, frozenset[str]], events: Any) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    exit_with_parent()
    try:
        database = open_database(campaign.database)
        found = {p: set(kinds) for p, kinds in known.items()}
        round = first_round
        while (left := deadline - time.time()) > 0.5:
            while not inbox.empty():
                policy, kind = inbox.get()
                found.setdefault(policy, set()).add(kind)
            policy = campaign.policies[(round + worker) % len(campaign.policies)]
            events.put(("round", worker, round))
            fuzz(policy, target_factory=campaign.target_factory, target_name=campaign.target_name,
                 seconds=min(ROUND_SECONDS, left), seed=stream_seed(campaign.seed, worker, round),
                 database=database, known=frozenset(found.get(policy, ())),
                 tally=Sender(events, worker, policy), max_work_gap=campaign.max_work_gap, ends_by=deadline,
                 engine=campaign.engine)
            round += 1
    except BaseException as e:
        worker_errors(events, worker)(e)
    events.put(("done", worker))


def run_campaign(campaign: Campaign, live: Callable[[Live], None] = lambda _: None,
                 report_every: float = REPORT_EVERY) -> tuple[CampaignState, bool]:
    """Run (or continue) the campaign until its hours are spent; its state, and whether a
    KeyboardInterrupt ended it. Reports are written about every ``report_every`` seconds
    (a tenth of a short campaign, MIN_REPORT_EVERY at least) and at the end."""
    from . import campaign_plot  # noqa: F401  (a KeyboardInterrupt inside numpy's first import breaks numpy)

    state = load_state(campaign.folder, campaign.seed)
    campaign = replace(campaign, seed=state.seed)
    left = campaign.hours * 3600 - state.seconds
    every = max(MIN_REPORT_EVERY, min(report_every, campaign.hours * 360))
    counts = Live(campaign.workers, time.perf_counter() - state.seconds, state.examples, state.steps,
                  Counter(state.coverage), {(v["policy"], v["kind"]): None for v in state.violations})
    if left <= 0:
        write_report(campaign, state, running=False)
        return state, False
    _point(state, counts)
    deadline = time.time() + left
    inboxes = [CONTEXT.Queue() for _ in range(campaign.workers)]
    known = {p: state.known(p) for p in campaign.policies}
    events, processes = start_workers(_campaign_worker, [
        (campaign, w, state.rounds.get(str(w), 0), deadline, inboxes[w], known) for w in range(campaign.workers)])
    reported, interrupted = time.perf_counter(), False
    round_started: dict[int, float] = {}  # worker -> when its round began, in campaign seconds

    def handle(event: Event | None) -> None:
        if event is not None and event[0] == "tally":
            counts.add(event[2], event[3])
            _found(campaign, state, counts, event[2], event[3].counterexamples, round_started[event[1]], inboxes)
        elif event is not None and event[0] == "round":
            state.rounds[str(event[1])] = event[2] + 1
            round_started[event[1]] = counts.seconds

    try:
        try:
            write_report(campaign, state, running=True)
            for event in receive(events, processes):
                handle(event)
                if time.time() >= deadline:
                    break
                if time.perf_counter() - reported >= every:
                    _point(state, counts)
                    write_report(campaign, state, running=True)
                    reported = time.perf_counter()
                live(counts)
            time.sleep(max(0.0, deadline - time.time()))  # the workers stop with under a second left: it is spent
        except KeyboardInterrupt:
            interrupted = True
        for event in drain(events):
            handle(event)
    finally:
        stop_workers(processes)
    _point(state, counts)
    write_report(campaign, state, running=False)
    return state, interrupted


def _found(campaign: Campaign, state: CampaignState, counts: Live, policy: str, found: Sequence[Counterexample],
           started: float, inboxes: Sequence[Any]) -> None:
    """Keep each counterexample of a kind new to its policy (its round ``started`` so many
    campaign seconds in): into the corpus, the state, every worker's inbox."""
    for c in found:
        if c.kind in state.known(policy):
            continue
        saved = save(c, campaign.corpus)
        state.violations.append({"policy": policy, "kind": c.kind, "message": c.message,
                                 "seconds": round(started + c.first_seen, 1), "trace": saved.paths[0]})
        counts.found.setdefault((policy, c.kind), None)
        for inbox in inboxes:
            inbox.put((policy, c.kind))


def _point(state: CampaignState, counts: Live) -> None:
    """Bring the state's counts up to date and add a point to its history."""
    before = state.history[-1] if state.history else None
    state.seconds, state.examples, state.steps = counts.seconds, counts.examples, counts.steps
    state.coverage = steps_per_path(counts.coverage)
    span = state.seconds - before["seconds"] if before else 0.0
    speed = (state.steps - before["steps"]) / span if before and span > 0 else 0.0
    state.history.append({"seconds": round(state.seconds, 2), "examples": state.examples, "steps": state.steps,
                          "steps_per_second": round(speed, 1), "coverage": dict(state.coverage),
                          "violations": len(state.violations)})
