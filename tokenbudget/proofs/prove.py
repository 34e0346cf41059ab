"""Every obligation of every policy, a verdict each.

``prove`` decides the obligations (policies in parallel worker processes, the
obligations of one policy in one process so they share its induction; a single policy's
obligations split into ``jobs`` fixed groups, round robin in table order, one process each,
so that its check uses every core: each group shares its own induction and its own earlier
counterexamples, and the groups depend only on ``jobs``; the bounded search over the model, where
the policy's loop needs it, runs once before the groups, its parts on every core, and is handed
to each); the commands judge
the outcomes (``tokenbudget/verdict.py``: built-ins against the manifest, user policies by
the one rule). ``emit`` writes each counterexample as a trace file, refusing to overwrite any file.
"""
from __future__ import annotations

import errno
import multiprocessing
import os
import re
from dataclasses import replace
from pathlib import Path
from typing import Callable, Optional, Sequence

from ..model import get_policy
from ..spec import interrupts
from ..spec.trace import Trace, write_trace
from .induction import unfollowed
from .loop_search import SEARCHED, searched, skeleton_models
from .obligation_table import all_obligations
from .obligations import Context, Options, as_found
from .symbolic_branch import symbolic_branch
from .verdicts import Outcome

Progress = Callable[[str], None]


def obligation_ids() -> list[str]:
    return list(all_obligations())


def _prove_one(policy_spec: str, obligations: Sequence[str], options: Options,
               loop_search: Optional[tuple[dict[str, Trace], float]] = None,
               candidates: Sequence[Trace] = ()) -> list[Outcome]:
    """The outcomes of one policy (``loop_search``: the model search's result, run before;
    ``candidates``: counterexamples found already); SymbolicBranchError when its code branches on a z3 term."""
    policy = get_policy(policy_spec)
    table_ = all_obligations()
    ctx = Context(policy, options)
    ctx.found.extend(as_found(t) for t in candidates)
    if loop_search is not None:
        setattr(ctx, "_loop_search", loop_search)
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
          progress: Progress = lambda _: None, candidates: Sequence[Trace] = ()) -> list[Outcome]:
    """The outcomes of ``obligations`` (default: all) for each policy, in table order.
    ``candidates`` (one policy only) are traces of that policy that may break some obligation
    (a fuzz run's, a replay's): a step obligation one of them breaks is refuted by it unless the
    search finds a smaller trace. ConfigError for a policy that cannot be loaded; ValueError for
    an unknown obligation; ProveInterrupted, with what finished, on Ctrl-C."""
    assert not candidates or len(policies) == 1, "candidates are one policy's"
    names = list(obligations or obligation_ids())
    unknown = [n for n in names if n not in all_obligations()]
    if unknown:
        raise ValueError(f"unknown obligation {unknown[0]!r}; known: {', '.join(obligation_ids())}")
    for spec in policies:
        get_policy(spec)  # fail early, in this process, on a policy that does not load
    results: list[list[Outcome]] = []
    if jobs > 1 and len(policies) == 1:
        return _prove_split(policies[0], names, options, jobs, progress, candidates)
    try:
        if jobs <= 1 or len(policies) <= 1:
            for spec in policies:
                progress(f"proving {spec}")
                results.append(_prove_one(spec, names, options, candidates=candidates))
        else:
            # Leaving the block terminates the workers: on Ctrl-C none is left proving.
            with multiprocessing.Pool(min(jobs, len(policies))) as pool:
                pending = [pool.apply_async(_prove_one, (spec, names, options)) for spec in policies]
                for spec, result in zip(policies, pending):
                    progress(f"proving {spec}")
                    results.append(result.get())
    except BaseException as e:
        if not isinstance(e, KeyboardInterrupt) and not interrupts.requested():
            raise
        raise ProveInterrupted([o for outcomes in results for o in outcomes], len(results)) from None
    return [o for outcomes in results for o in outcomes]


def _prove_split(spec: str, names: Sequence[str], options: Options, jobs: int, progress: Progress,
                 candidates: Sequence[Trace]) -> list[Outcome]:
    """One policy's obligations in ``jobs`` groups (round robin), a worker process each; table order kept."""
    applies = [n for n in names if all_obligations()[n].applies(get_policy(spec))]
    groups = [applies[i::jobs] for i in range(min(jobs, len(applies)))]
    try:
        if len(groups) <= 1:
            progress(f"proving {spec}")
            return _prove_one(spec, names, options, candidates=candidates)
        progress(f"proving {spec} ({len(groups)} processes)")
        policy, shared = get_policy(spec), None
        if (not skeleton_models(policy) or unfollowed(policy)) and set(applies) & set(SEARCHED):
            shared = searched(policy, options.max_requests, len(groups))  # else each group would run it
        with multiprocessing.Pool(len(groups)) as pool:
            pending = [pool.apply_async(_prove_one, (spec, group, options, shared, candidates)) for group in groups]
            by_name = {o.obligation: o for result in pending for o in result.get()}
    except BaseException as e:
        if not isinstance(e, KeyboardInterrupt) and not interrupts.requested():
            raise
        raise ProveInterrupted([], 0) from None
    return [by_name[n] for n in applies]


class ProveInterrupted(KeyboardInterrupt):
    """Ctrl-C stopped ``prove``: ``outcomes`` of the ``policies_done`` first policies, which
    finished; no worker is left running."""

    def __init__(self, outcomes: list[Outcome], policies_done: int) -> None:
        super().__init__()
        self.outcomes, self.policies_done = outcomes, policies_done


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
