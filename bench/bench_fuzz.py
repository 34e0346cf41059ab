"""Benchmark: the seconds to each known bug, per seed, within a cap; and fuzzing throughput.

Run after ``pip install -e .``::

    python bench/bench_fuzz.py [--seeds 5] [--cap 60] [--examples 200] [--only TEXT] [--json]

Targets come from the tables, never a hand list (``targets``), each a (policy, identity):

- every finding about an engine's loop (``model.findings``), on each built-in of its engine
  whose version the finding affects, as ``invariant@F<n>``: found only when the violation the
  fuzzer reports carries that identity, which the finding's matcher gives it
  (``fuzz.failures.identity``), so F2, F3 and F4, all ``progress``, are told apart;
- every invariant the fuzzer judges that a built-in's own record has it break
  (``tokenbudget.verdict.recorded_violations``): found when that invariant is seen on that
  policy, whatever its mechanism.

Each target is searched on each seed 0 .. ``--seeds`` - 1 by the session ``tokenbudget fuzz
--policy P --seed S`` runs (``fuzz.session.fuzz``, in-process, no example database), for at
most ``--cap`` seconds, and the time is its ``first_seen``: the seconds from the start of that
session to the step that first showed the violation, as the command reports it. The other
invariants, and the other findings of the same invariant, are known to the session, so
they do not stop the search; shrinking is left out, so a violation of the same invariant
that no finding explains, seen first, costs no shrinking (the command would shrink it).
The load average (1 min) is noted beside each search: timings on a loaded machine are longer.

Throughput: for each built-in policy, the reference model's scheduler steps per second
inside Hypothesis (``--examples`` examples, generation only; 0 skips it).

Exit status 0 when every (target, seed) is found within the cap, 1 otherwise.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from dataclasses import asdict, dataclass
from typing import Any, Optional

from hypothesis import Phase

from tokenbudget.check import JUDGED
from tokenbudget.fuzz.failures import KINDS, kind_of
from tokenbudget.fuzz.machine import FuzzStats, machine_class
from tokenbudget.fuzz.session import Counterexample, fuzz, run_machine
from tokenbudget.model import builtin_policies, get_policy
from tokenbudget.model.findings import FINDINGS
from tokenbudget.verdict import recorded_violations

CAP = 60.0
SEARCH = (Phase.explicit, Phase.reuse, Phase.generate, Phase.target)  # the command's, less shrinking
GENERATE = (Phase.explicit, Phase.generate)
ALL_KINDS = frozenset(KINDS)  # bare kinds: each stands for every mechanism of its invariant


@dataclass(frozen=True)
class Target:
    """A known bug to find: ``identity`` on ``policy``; ``finding`` names the finding whose
    matcher must give it (None: a built-in's recorded violation, found by its invariant)."""

    policy: str
    identity: str
    finding: Optional[str] = None

    @property
    def invariant(self) -> str:
        return kind_of(self.identity)

    def found_by(self, found: Counterexample) -> bool:
        """Whether a counterexample of the session is this target."""
        return found.key == self.identity if self.finding else found.kind == self.identity

    def known(self) -> frozenset[str]:
        """What the session is told is known: every other invariant, and the other findings'
        identities of this one (never the bare invariant: it stands for every mechanism)."""
        others = {f"{f.invariant}@{f.id}" for f in FINDINGS.values()
                  if f.invariant == self.invariant and f.id != self.finding}
        return (ALL_KINDS - {self.invariant}) | (others if self.finding else set())


def finding_policies(finding_id: str) -> list[str]:
    """The built-ins of the finding's engine whose version the finding affects."""
    finding = FINDINGS[finding_id]
    return [name for name in builtin_policies()
            if get_policy(name).engine == finding.engine and get_policy(name).version in finding.affects_versions]


def targets() -> list[Target]:
    """Every finding on each built-in it affects, then every recorded violation the fuzzer judges."""
    out = [Target(policy, f"{f.invariant}@{f.id}", f.id) for f in FINDINGS.values() for policy in finding_policies(f.id)]
    out += [Target(policy, kind) for policy in builtin_policies()
            for kind in sorted(recorded_violations(policy) & set(JUDGED))]
    return out


def time_to(target: Target, seed: int, cap: float) -> Optional[float]:
    """Seconds from the session's start to the first sight of ``target``, or None within ``cap``."""
    report = fuzz(target.policy, seconds=cap, seed=seed, phases=SEARCH, known=target.known(),
                  stop_when_found=frozenset({target.identity}), reduce_seconds=0)
    return next((c.first_seen for c in report.counterexamples if target.found_by(c)), None)


@dataclass(frozen=True)
class Searched:
    """One target's seconds per seed (None: not within the cap), the load average beside each."""

    policy: str
    identity: str
    seconds: list[Optional[float]]
    load: list[float]

    @property
    def worst(self) -> Optional[float]:
        return None if None in self.seconds else max(s for s in self.seconds if s is not None)


def search(target: Target, seeds: int, cap: float) -> Searched:
    seconds, load = [], []
    for seed in range(seeds):
        found = time_to(target, seed, cap)
        seconds.append(None if found is None else round(found, 2))
        load.append(round(os.getloadavg()[0], 2))
    return Searched(target.policy, target.identity, seconds, load)


def throughput(policy: str, examples: int, seed: int) -> dict[str, Any]:
    """Steps per second of one run of ``examples`` examples that never stops at a failure."""
    cls = machine_class(policy, get_policy(policy))
    cls.stats = FuzzStats()
    cls.known = ALL_KINDS
    started = time.perf_counter()
    run_machine(cls, examples, seed, GENERATE)
    seconds = time.perf_counter() - started
    return {"policy": policy, "examples": cls.stats.examples, "steps": cls.stats.steps, "seconds": round(seconds, 2),
            "steps_per_second": round(cls.stats.steps / seconds, 1)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, default=5, help="seeds 0 .. N-1 per target (default 5)")
    parser.add_argument("--cap", type=float, default=CAP, help=f"seconds per (target, seed) (default {CAP:g})")
    parser.add_argument("--examples", type=int, default=200, help="examples per throughput run; 0: none (default 200)")
    parser.add_argument("--only", action="append", default=[], metavar="TEXT",
                        help="only the targets whose 'policy identity' contains TEXT (repeatable)")
    parser.add_argument("--json", action="store_true", help="print one JSON document")
    args = parser.parse_args(argv)
    chosen = [t for t in targets() if not args.only or any(o in f"{t.policy} {t.identity}" for o in args.only)]
    if not chosen:
        print(f"bench_fuzz: no target matches {args.only}", file=sys.stderr)
        return 2
    speeds = [throughput(p, args.examples, seed=0) for p in builtin_policies()] if args.examples > 0 else []
    results = []
    for target in chosen:
        results.append(search(target, args.seeds, args.cap))
        if not args.json:
            r = results[-1]
            runs = " ".join("-" if t is None else f"{t:.1f}" for t in r.seconds)
            print(f"  {r.policy:30} {r.identity:16} {runs:32} (load {' '.join(f'{x:.1f}' for x in r.load)})",
                  flush=True)
    ok = all(r.worst is not None for r in results)
    if args.json:
        print(json.dumps({"ok": ok, "cap_seconds": args.cap, "seeds": args.seeds, "throughput": speeds,
                          "time_to_first": [{**asdict(r), "worst": r.worst} for r in results]}, indent=2))
    else:
        for s in speeds:
            print(f"  {s['policy']:30} {s['steps_per_second']:8.0f} steps/s  ({s['steps']} steps, "
                  f"{s['examples']} examples, {s['seconds']} s)")
        missed = [f"{r.policy} {r.identity} seed {seed}" for r in results for seed, t in enumerate(r.seconds) if t is None]
        print(f"verdict: {'ok' if ok else 'FAIL'}: {len(results)} targets x {args.seeds} seeds, cap {args.cap:g} s"
              + (f"; not found: {', '.join(missed)}" if missed else ""))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
