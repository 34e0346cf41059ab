"""``tokenbudget fuzz``: Hypothesis stateful fuzzing of policies on a target (``fuzz.session``)."""
from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path
from typing import Any, Sequence

from . import render
from .args import (add_database, add_json, add_policy, add_verdict_options, at_most, folder,
                   positive_float, positive_int, seed, add_sync, apply_sync)
from .console import Console
from .engine_path import STARTED_ENV, add_engine_path, announce, own_process_started
from .evidence import NO_EVIDENCE, floor_of, shortfall
from .exits import FAILED, INTERRUPTED, NO_EVIDENCE as NO_EVIDENCE_EXIT, OK
from .fuzz.database import open_database
from .fuzz.parallel import Job, WorkerDied, fuzz_workers
from .fuzz.session import STARTUP_SECONDS, Counterexample, FuzzReport, Tally, fuzz, save
from .harness import registry
from .harness.engine_descriptor import FUZZ
from .model import POLICY_ERROR, BudgetConfig, PolicyError, builtin_policies, get_policy
from .model.replay import BadInput
from .model.target import ModelTarget, TargetFactory
from .fuzz.trace_starts import usable_starts
from .spec.trace import Trace, load_trace
from .spec.user_paths import writable_folder
from .startup_alarm import StartupHung, startup_alarm
from .model.findings import FINDINGS
from .targets import MODEL
from .verdict import Judge, Verdict, failed

HELP = "fuzz policies with Hypothesis; each counterexample becomes a trace"
DESCRIPTION = ("Drive a target step by step with Hypothesis-generated requests, steps and aborts, judging "
               "every step with the spec. Each violated invariant is shrunk to a minimal trace, written to "
               "the corpus folder with the Hypothesis program beside it; it replays with `tokenbudget "
               "replay`. Each violation is judged as check and prove judge it: exit 1 when one is the policy's "
               "own (or over its base, or known under --strict), else 0.")

DEFAULT_SECONDS = 10.0
MAX_EXAMPLES = 10**7  # per policy
MAX_SECONDS = 7 * 86400.0  # a week per policy


def command_started() -> float:
    """``time.time()`` when this command started: in a child the command started for
    ``--engine-path`` (``engine_path.STARTED_ENV`` set), when that process started, so its
    imports count; else now (``run`` asks as it begins: the process may be a long-lived
    caller of ``cli.main``). The start-up a fuzz run reports, and caps, counts from there."""
    return own_process_started() if os.environ.get(STARTED_ENV) else time.time()


def target_factory(target: str) -> TargetFactory:
    """What executes the ops of ``--target target``: the model, or a registered engine's fuzz target."""
    return ModelTarget if target == MODEL else registry.engine(target).fuzz_target()


def add_target(parser: argparse.ArgumentParser, command: str) -> None:
    """``--target``: the model or a registered engine that supports ``command``."""
    engines = registry.names(command)
    parser.add_argument("--target", choices=(MODEL, *engines), default=MODEL,
                        help="what executes the ops: the reference model, or a real engine's scheduler, judged by "
                             "the spec and in lockstep with the model: " + "; ".join(
                                 f"{n}, {registry.engine(n).target_help}" for n in engines))


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_policy(parser, "fuzz this policy (repeatable; default: every built-in on the model; on a real engine the "
                       "policy its release maps to)")
    add_target(parser, FUZZ)
    budget = parser.add_mutually_exclusive_group()
    budget.add_argument("--examples", type=at_most(positive_int, MAX_EXAMPLES), metavar="N",
                        help="Hypothesis examples per policy, shrinking included")
    budget.add_argument("--seconds", type=at_most(positive_float, MAX_SECONDS), metavar="S",
                        help=f"seconds of fuzzing per policy, shrinking included, counted from its first example "
                             f"(default {DEFAULT_SECONDS:g}); start-up before it is reported apart")
    parser.add_argument("--startup-seconds", type=at_most(positive_float, MAX_SECONDS), default=STARTUP_SECONDS,
                        metavar="S", help="the most seconds start-up may take (starting the command, importing the "
                                          "engine, spawning workers, building the first target) before fuzzing gives "
                                          "up with no evidence (default %(default)g)")
    parser.add_argument("--seed", type=seed, default=0,
                        help="the Hypothesis seed (default 0); worker 0 uses it, the others seeds derived from it")
    parser.add_argument("--workers", type=positive_int, default=os.cpu_count() or 1, metavar="N",
                        help="worker processes, each with the whole budget on its own seed stream "
                             "(default: the cores, %(default)s here); 1 fuzzes in this process")
    add_verdict_options(parser)
    add_database(parser)
    parser.add_argument("--corpus", type=folder, metavar="DIR",
                        help="where counterexample traces go (default: a new temp dir); existing files are kept")
    parser.add_argument("--start-from", type=Path, metavar="TRACE|DIR",
                        help="start one run in two from these traces (a trace file, or a folder's *.json, such as "
                             "`check --corpus` writes): a prefix of one's ops, then the fuzzer's rules; each policy "
                             "starts from those whose config it accepts")
    add_engine_path(parser)
    add_sync(parser, True)
    add_json(parser)


def run(args: argparse.Namespace, console: Console) -> int:
    apply_sync(args, True)
    started = command_started()
    engine = registry.find(args.target)
    policies: Sequence[str] = list(dict.fromkeys(args.policies))
    if not policies:  # on an engine its release's policy (the engine missing: bad input, now)
        policies = list(builtin_policies()) if engine is None else [engine.modelled(args.engine_path).policy]
    factory = target_factory(args.target)
    if args.corpus is not None:  # before any work
        writable_folder(args.corpus, "--corpus")
    identity = "" if engine is None else engine.identity(args.engine_path)  # keys the saved examples
    seconds = None if args.examples else args.seconds or DEFAULT_SECONDS
    starts = () if args.start_from is None else start_traces(args.start_from, policies)
    if args.workers == 1:  # start-up in this process: stopped at its cap by an alarm, not by a parent
        reports: list[FuzzReport] = []
        began: list[bool] = []

        def heard(tally: Tally) -> None:
            if tally.began and not began:
                began.append(True)

        try:
            with startup_alarm(started + args.startup_seconds - time.time(), lambda: bool(began)):
                _check_policies(policies, engine, factory, args, console)
                database, corpus = open_database(args.database), _corpus(args)
                for index, policy in enumerate(policies):
                    reports.append(fuzz(policy, target_factory=factory, target_name=args.target,
                                        examples=args.examples, seconds=seconds, seed=args.seed, corpus=corpus,
                                        progress=console.progress, database=database,
                                        max_work_gap=args.max_work_gap, startup_seconds=args.startup_seconds,
                                        started=started if index == 0 else None, tally=heard,
                                        engine=identity, starts=starts))
                    if reports[-1].interrupted:
                        break
        except StartupHung:
            corpus = _corpus(args)
            reports = [FuzzReport(p, args.target, args.seed, startup_seconds=time.time() - started,
                                  startup_exceeded=True) for p in policies]
    else:
        _check_policies(policies, engine, factory, args, console)
        corpus = _corpus(args)
        job = Job(tuple(policies), factory, args.target, args.examples, seconds, args.seed, args.database, started,
                  args.max_work_gap, args.startup_seconds, identity, starts)
        try:
            reports = fuzz_workers(job, args.workers, lambda live: console.progress(render.live(live)))
        except WorkerDied as e:
            users = [p for p in policies if p not in builtin_policies()]
            if not users:
                raise
            return _worker_died(console, args.json, e, users)
        for r in reports:
            r.counterexamples[:] = [save(c, corpus) for c in r.counterexamples]
    interrupted = reports[-1].policy if reports and reports[-1].interrupted else None
    verdicts = {r.policy: [_verdict(args, r.policy, c) for c in r.counterexamples] for r in reports}
    fails = failed((v for judged in verdicts.values() for v in judged), args.strict)
    short = {r.policy: None if failed(verdicts[r.policy], args.strict) else _no_evidence(args, r) for r in reports}
    if args.json:
        console.json({"ok": not fails and not any(short.values()), "verdict": _verdict_word(fails, short),
                      "target": args.target, "workers": args.workers, "database": args.database,
                      "corpus": str(corpus), "interrupted": interrupted, "strict": args.strict,
                      "policies": [{**r.to_json(), "ok": not failed(verdicts[r.policy], args.strict) and
                                    short[r.policy] is None, "no_evidence": short[r.policy],
                                    "known": sorted(v.invariant for v in verdicts[r.policy] if v.known),
                                    "judged": {c.key: v.kind for c, v in zip(r.counterexamples, verdicts[r.policy])}}
                                   for r in reports]})
    else:
        console.text(render.fuzz(reports, verdicts, corpus, interrupted, args.strict, short))
    return INTERRUPTED if interrupted else FAILED if fails else NO_EVIDENCE_EXIT if any(short.values()) else OK


def start_traces(path: Path, policies: Sequence[str]) -> tuple[Trace, ...]:
    """The traces of ``--start-from``: a trace file, or every ``*.json`` of a folder. Bad
    input (TraceError, BadInput) when one is no trace, or no policy accepts any one's config."""
    paths = sorted(path.glob("*.json")) if path.is_dir() else [path]
    traces = tuple(load_trace(p) for p in paths)

    def starts_any(policy: str) -> bool:
        try:
            return bool(usable_starts(get_policy(policy), traces))
        except PolicyError:  # the policy fails as it is built: the session reports it
            return True

    found_on = "(`tokenbudget check --policy P --corpus DIR` writes the traces it finds)"
    if not traces:
        raise BadInput(f"--start-from {path}: the folder holds no *.json trace; give a trace file or a folder of them "
                       f"{found_on}")
    if not any(starts_any(p) for p in policies):
        who = policies[0] if len(policies) == 1 else f"any of the {len(policies)} policies"
        raise BadInput(f"--start-from {path}: no trace there has ops on a config {who} accepts; give traces found on "
                       f"the policy {found_on}")
    return traces


def _corpus(args: argparse.Namespace) -> Path:
    """Where counterexamples go: ``--corpus``, else a new temp folder."""
    return args.corpus or Path(tempfile.mkdtemp(prefix="tokenbudget-fuzz-"))


def _check_policies(policies: Sequence[str], engine: Any, factory: TargetFactory, args: argparse.Namespace,
                    console: Console) -> None:
    """Refuse now (bad input) an unknown policy, a missing engine, a policy the target cannot
    run, then name the engine driven; a policy that fails itself is left to the session."""
    for policy in policies:
        try:
            if engine is None:
                factory(BudgetConfig(), get_policy(policy))
            else:
                engine.check_policy(get_policy(policy))
        except PolicyError:
            pass
    if engine is not None:
        announce(console, args.target, args.engine_path)


def _no_evidence(args: argparse.Namespace, report: FuzzReport) -> str | None:
    """Why a policy's run is no evidence (``tokenbudget.evidence``), or None: it met its floor."""
    why = shortfall(report.examples, report.steps, floor_of(args.target, args.examples))
    if why is not None and report.startup_exceeded:
        why += f": start-up ran past --startup-seconds {args.startup_seconds:g}"
    return why


def _verdict_word(fails: bool, short: dict[str, str | None]) -> str:
    return "FAIL" if fails else NO_EVIDENCE if any(short.values()) else "ok"


def _verdict(args: argparse.Namespace, policy: str, found: Counterexample) -> Verdict:
    """The verdict on a counterexample: on an engine whose findings name their mechanism,
    known only where a finding's matcher named it (its identity, ``fuzz.failures.identity``),
    never by its kind alone; on another target by the one rule (``tokenbudget.verdict``)."""
    engine = registry.find(args.target)
    if engine is None or not engine.findings_name_mechanism:
        return Judge(policy, args.max_work_gap).of_violation(found.kind, found.trace, found.message)
    finding = FINDINGS.get(found.key.partition("@")[2])
    return Verdict(found.kind, found.message, known=None if finding is None else f"{finding.id}, {finding.spec}")


def _worker_died(console: Console, as_json: bool, died: WorkerDied, users: Sequence[str]) -> int:
    """A worker died while user policies ran in it: their verdict, policy-error, never a pass."""
    message = (f"{POLICY_ERROR}: {died} while it fuzzed {', '.join(users)}: code of the policy ended the process "
               f"(os.kill, a crash in C code); run with --workers 1 to see where")
    if as_json:
        console.json({"ok": False, "error": message})
    else:
        console.text(f"{render.clean(message)}\nverdict: {POLICY_ERROR}")
    return FAILED
