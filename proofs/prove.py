"""``tokenbudget prove``: every obligation of every policy, a verdict each, against the manifest.

``prove`` decides the obligations (policies in parallel worker processes, the
obligations of one policy in one process so they share its induction). ``judge``
compares the outcomes with the verdict manifest for built-in policies; a user policy
(``pkg.module:Class``) fails on a refuted safety obligation or an unknown verdict.
``emit`` writes each counterexample as a trace file, refusing to overwrite any file.
"""
from __future__ import annotations

import argparse
import os
import re
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable, Optional, Sequence

from ..model import builtin_policies, get_policy
from ..model.replay import BadInput
from ..spec.invariants import INVARIANTS, LEDGER
from ..spec.trace import Trace, write_trace
from . import manifest
from .obligation_table import all_obligations
from .obligations import Context, Options
from .solving import Z3_VERSION
from .verdicts import PROVED_UP_TO, REFUTED, UNKNOWN, Outcome

Progress = Callable[[str], None]


class UsageError(ValueError):
    """Bad arguments to prove (an unknown obligation, a trace file that exists): one line."""


def obligation_ids() -> list[str]:
    return list(all_obligations())


def _prove_one(policy_spec: str, obligations: Sequence[str], options: Options) -> list[Outcome]:
    policy = get_policy(policy_spec)
    table_ = all_obligations()
    ctx = Context(policy, options)
    out = []
    for name in obligations:
        obligation = table_[name]
        if obligation.applies(policy):
            outcome = obligation.decide(ctx)
            # a user policy is reported under the spec it was loaded by, never a built-in's name
            out.append(outcome if outcome.policy == policy_spec else replace(outcome, policy=policy_spec))
    return out


def prove(policies: Sequence[str], options: Options, obligations: Optional[Sequence[str]] = None, jobs: int = 1,
          progress: Progress = lambda _: None) -> list[Outcome]:
    """The outcomes of ``obligations`` (default: all) for each policy, in table order.
    ConfigError for a policy that cannot be loaded; UsageError for an unknown obligation."""
    names = list(obligations or obligation_ids())
    unknown = [n for n in names if n not in all_obligations()]
    if unknown:
        raise UsageError(f"unknown obligation {unknown[0]!r}; known: {', '.join(obligation_ids())}")
    for spec in policies:
        get_policy(spec)  # fail early, in this process, on a policy that does not load
    if jobs <= 1 or len(policies) <= 1:
        results = []
        for spec in policies:
            progress(f"proving {spec}")
            results.append(_prove_one(spec, names, options))
    else:
        with ProcessPoolExecutor(max_workers=min(jobs, len(policies))) as pool:
            futures = [pool.submit(_prove_one, spec, names, options) for spec in policies]
            results = []
            for spec, future in zip(policies, futures):
                progress(f"proving {spec}")
                results.append(future.result())
    return [o for outcomes in results for o in outcomes]


@dataclass
class Judgement:
    outcomes: list[Outcome]
    expected: dict[tuple[str, str], Optional[manifest.Expected]] = field(default_factory=dict)
    complaints: dict[tuple[str, str], str] = field(default_factory=dict)  # (policy, obligation) -> what is wrong

    @property
    def problems(self) -> list[str]:
        return list(self.complaints.values())

    @property
    def ok(self) -> bool:
        return not self.complaints


def judge(outcomes: Sequence[Outcome]) -> Judgement:
    """Built-in policies against the manifest. A user policy is judged on the budget
    invariants it controls: it fails on a refuted ledger invariant or an unknown verdict;
    its other refutations (the engine's loop, its config checks, efficiency) are reported."""
    builtin = builtin_policies()
    recorded = manifest.load()
    out = Judgement(list(outcomes))
    for o in outcomes:
        key = (o.policy, o.obligation)
        if o.policy in builtin:
            out.expected[key] = manifest.expected_of(recorded, o)
            complaint = manifest.problem(o, out.expected[key])
        elif o.verdict == UNKNOWN:
            complaint = f"{o.policy} / {o.obligation}: unknown ({o.detail})"
        elif o.verdict == REFUTED and o.obligation in INVARIANTS and INVARIANTS[o.obligation].kind == LEDGER:
            complaint = f"{o.policy} / {o.obligation}: refuted ({o.detail})"
        else:
            complaint = None
        if complaint:
            out.complaints[key] = complaint
    return out


def trace_files(outcomes: Sequence[Outcome], directory: Path) -> list[tuple[Path, Trace]]:
    """Where each counterexample trace goes: ``<policy>--<obligation>[--<trace policy>].json``."""
    out = []
    for o in outcomes:
        for trace in o.traces:
            stem = f"{o.policy}--{o.obligation}" + (f"--{trace.policy}" if len(o.traces) > 1 else "")
            out.append((directory / (re.sub(r"[^A-Za-z0-9._-]", "_", stem) + ".json"), trace))
    return out


def emit(outcomes: Sequence[Outcome], directory: Path) -> list[Path]:
    """Write every counterexample trace under ``directory`` (created if missing); UsageError,
    writing nothing, when one of the files exists already."""
    files = trace_files(outcomes, directory)
    for path, _ in files:
        if path.exists():
            raise UsageError(f"{path} exists; --emit-traces never overwrites a file (choose an empty directory)")
    directory.mkdir(parents=True, exist_ok=True)
    for path, trace in files:
        write_trace(trace, path)
    return [path for path, _ in files]


def to_json(j: Judgement, options: Options, written: Sequence[Path]) -> dict[str, Any]:
    rows = []
    for o in j.outcomes:
        row = o.to_json()
        expected = j.expected.get((o.policy, o.obligation))
        row["expected"] = None if expected is None else expected.verdict
        row["as_expected"] = (o.policy, o.obligation) not in j.complaints
        rows.append(row)
    return {"ok": j.ok, "z3": Z3_VERSION, "max_requests": options.max_requests, "timeout_s": options.timeout_s,
            "outcomes": rows, "problems": j.problems, "traces_written": [str(p) for p in written]}


def render(j: Judgement, written: Sequence[Path]) -> str:
    """The policy x obligation table (verdict, bound, time), then the details and problems."""
    from ..render import table  # the CLI's tables (imported here: render imports check, which imports this)

    obligations = list(dict.fromkeys(o.obligation for o in j.outcomes))
    policies = list(dict.fromkeys(o.policy for o in j.outcomes))
    by = {(o.policy, o.obligation): o for o in j.outcomes}
    rows = []
    for name in obligations:
        cells = []
        for policy in policies:
            o = by.get((policy, name))
            cells.append("-" if o is None else f"{_short(o)} {o.seconds:.1f}s")
        rows.append([name, *cells])
    lines = table(["obligation", *policies], rows)
    lines += ["", f"z3 {Z3_VERSION}; proved: for every accepted config and any number of requests; "
                  f"proved<=N: for every state of at most N requests; refuted: with a replaying trace", ""]
    for o in j.outcomes:
        lines.append(f"{o.policy} / {o.obligation}: {o.label} ({o.method}, {o.seconds:.2f}s): {o.detail}")
    if written:
        lines += ["", f"{len(written)} counterexample trace(s) written:", *(f"  {p}" for p in written)]
    lines += ["", "every verdict is as expected" if j.ok else f"{len(j.problems)} unexpected:"]
    lines += [f"  {p}" for p in j.problems]
    return "\n".join(lines)


def _short(o: Outcome) -> str:
    return {PROVED_UP_TO: f"proved<={o.bound}"}.get(o.verdict, o.verdict)


def default_jobs() -> int:
    return max(1, os.cpu_count() or 1)


# -- the command line ---------------------------------------------------------------------
def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--policy", action="append", dest="policies", default=[], metavar="P",
                        help="prove this policy (repeatable; a name or pkg.module:Class; default: every built-in)")
    parser.add_argument("--invariant", action="append", dest="obligations", default=[], metavar="I",
                        help=f"only this obligation (repeatable): {', '.join(obligation_ids())}")
    parser.add_argument("--max-requests", type=_positive(int), default=Options.max_requests, metavar="N",
                        help=f"bound of the bounded proofs and the counterexample search (default "
                             f"{Options.max_requests})")
    parser.add_argument("--timeout", type=_positive(float), default=Options.timeout_s, metavar="S",
                        help=f"seconds z3 may spend on one query; a timeout is an unknown verdict, a failure "
                             f"(default {Options.timeout_s:g})")
    parser.add_argument("--emit-traces", type=Path, metavar="DIR",
                        help="write every counterexample as a trace file in DIR (never overwrites a file)")
    parser.add_argument("--json", action="store_true", help="print one JSON document")


def _positive(kind: Callable[[str], Any]) -> Callable[[str], Any]:
    def parse(text: str) -> Any:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a positive number, got {text!r}") from None
        if value <= 0:
            raise argparse.ArgumentTypeError(f"expected a positive number, got {text!r}")
        return value
    return parse


def prove_command(args: argparse.Namespace, progress: Progress, print_json: Callable[[Any], None]) -> int:
    """Exit status: 0 every verdict as expected, 1 otherwise; BadInput (status 2) for bad usage."""
    options = Options(max_requests=args.max_requests, timeout_s=args.timeout)
    policies = list(dict.fromkeys(args.policies)) or list(builtin_policies())
    try:
        outcomes = prove(policies, options, list(dict.fromkeys(args.obligations)) or None, default_jobs(), progress)
        written = emit(outcomes, args.emit_traces) if args.emit_traces is not None else []
    except UsageError as e:
        raise BadInput(str(e)) from None
    result = judge(outcomes)
    if args.json:
        print_json(to_json(result, options, written))
    else:
        print(render(result, written))
    return 0 if result.ok else 1
