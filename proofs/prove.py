"""Every obligation of every policy, a verdict each, judged against the manifest.

``prove`` decides the obligations (policies in parallel worker processes, the
obligations of one policy in one process so they share its induction). ``judge``
compares the outcomes with the verdict manifest for built-in policies; a user policy
(``pkg.module:Class``) fails on an unknown verdict and on a refutation that is its own
(``model.verdict_rules``: not explained by a finding nor shown by its base on the same
trace; for work-conserving, more undone work than its base).
``emit`` writes each counterexample as a trace file, refusing to overwrite any file.
"""
from __future__ import annotations

import errno
import multiprocessing
import os
import re
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable, Optional, Sequence

from ..model import builtin_policies, get_policy
from ..model.verdict_rules import refutation_complaint
from ..spec.trace import Trace, write_trace
from . import manifest
from .obligation_table import all_obligations
from .obligations import Context, Options
from .symbolic_branch import symbolic_branch
from .verdicts import REFUTED, UNKNOWN, Outcome

Progress = Callable[[str], None]


def obligation_ids() -> list[str]:
    return list(all_obligations())


def _prove_one(policy_spec: str, obligations: Sequence[str], options: Options) -> list[Outcome]:
    """The outcomes of one policy; SymbolicBranchError when its code branches on a z3 term."""
    policy = get_policy(policy_spec)
    table_ = all_obligations()
    ctx = Context(policy, options)
    out = []
    for name in obligations:
        obligation = table_[name]
        if obligation.applies(policy):
            try:
                outcome = obligation.decide(ctx)
            except Exception as e:
                named = symbolic_branch(e)
                if named is None:
                    raise
                raise named from None
            # a user policy is reported under the spec it was loaded by, never a built-in's name
            out.append(outcome if outcome.policy == policy_spec else replace(outcome, policy=policy_spec))
    return out


def prove(policies: Sequence[str], options: Options, obligations: Optional[Sequence[str]] = None, jobs: int = 1,
          progress: Progress = lambda _: None) -> list[Outcome]:
    """The outcomes of ``obligations`` (default: all) for each policy, in table order.
    ConfigError for a policy that cannot be loaded; ValueError for an unknown obligation;
    ProveInterrupted, with what finished, on Ctrl-C."""
    names = list(obligations or obligation_ids())
    unknown = [n for n in names if n not in all_obligations()]
    if unknown:
        raise ValueError(f"unknown obligation {unknown[0]!r}; known: {', '.join(obligation_ids())}")
    for spec in policies:
        get_policy(spec)  # fail early, in this process, on a policy that does not load
    results: list[list[Outcome]] = []
    try:
        if jobs <= 1 or len(policies) <= 1:
            for spec in policies:
                progress(f"proving {spec}")
                results.append(_prove_one(spec, names, options))
        else:
            # Leaving the block terminates the workers: on Ctrl-C none is left proving.
            with multiprocessing.Pool(min(jobs, len(policies))) as pool:
                pending = [pool.apply_async(_prove_one, (spec, names, options)) for spec in policies]
                for spec, result in zip(policies, pending):
                    progress(f"proving {spec}")
                    results.append(result.get())
    except KeyboardInterrupt:
        raise ProveInterrupted([o for outcomes in results for o in outcomes], len(results)) from None
    return [o for outcomes in results for o in outcomes]


class ProveInterrupted(KeyboardInterrupt):
    """Ctrl-C stopped ``prove``: ``outcomes`` of the ``policies_done`` first policies, which
    finished; no worker is left running."""

    def __init__(self, outcomes: list[Outcome], policies_done: int) -> None:
        super().__init__()
        self.outcomes, self.policies_done = outcomes, policies_done


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

    def to_json(self) -> dict[str, Any]:
        """Each outcome with the verdict and seconds the manifest records and whether it is as expected."""
        rows = []
        for o in self.outcomes:
            expected = self.expected.get((o.policy, o.obligation))
            rows.append({**o.to_json(), "expected": None if expected is None else expected.verdict,
                         "recorded_seconds": None if expected is None else expected.seconds,
                         "as_expected": (o.policy, o.obligation) not in self.complaints})
        return {"ok": self.ok, "outcomes": rows, "problems": self.problems}


def judge(outcomes: Sequence[Outcome], max_work_gap: int = 0, strict: bool = False) -> Judgement:
    """Built-in policies against the manifest. A user policy fails on an unknown verdict
    and on every refutation ``verdict_rules.refutation_complaint`` finds its own (with
    ``strict``, on known ones too; a work gap over its base's by at most ``max_work_gap``
    tokens is accepted)."""
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
        elif o.verdict == REFUTED:
            why = refutation_complaint(o.policy, o.obligation, o.traces, max_work_gap, strict)
            complaint = f"{o.policy} / {o.obligation}: refuted, {why} ({o.detail})" if why else None
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
    """Write every counterexample trace under ``directory`` (created if missing);
    FileExistsError, writing nothing, when one of the files exists already."""
    files = trace_files(outcomes, directory)
    for path, _ in files:
        if path.exists():
            raise FileExistsError(errno.EEXIST, "a counterexample trace file exists", str(path))
    directory.mkdir(parents=True, exist_ok=True)
    for path, trace in files:
        write_trace(trace, path)
    return [path for path, _ in files]


def default_jobs() -> int:
    return max(1, os.cpu_count() or 1)
