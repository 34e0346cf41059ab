"""``tokenbudget fuzz``: Hypothesis stateful fuzzing of policies on a target (``fuzz.session``).

Each policy gets the whole budget (``--examples`` or ``--seconds``) in turn. Every shrunk
counterexample is written to the corpus folder (default: a new temp dir) as a trace,
with the Hypothesis program beside it; files that exist are never overwritten. Exit
status 0 when no invariant was violated, 1 when some was (as ``replay`` exits 1 on a
trace that shows a violation): the summary says for each whether it is known
(``check.is_known``). vLLM missing is bad input (the CLI's 2).
"""
from __future__ import annotations

import argparse
import tempfile
from pathlib import Path
from typing import Any, Callable, Sequence

from .check import is_known
from .fuzz.session import FuzzReport, fuzz
from .model.target import ModelTarget, TargetFactory
from .harness.vllm.target import VllmTarget
from .model import BudgetConfig, builtin_policies, get_policy
from .render import table
from .exits import FAILED, OK
from .targets import MODEL, VLLM

TARGETS: dict[str, TargetFactory] = {MODEL: ModelTarget, VLLM: VllmTarget}
DEFAULT_SECONDS = 10.0


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--policy", action="append", dest="policies", default=[], metavar="P",
                        help="fuzz this policy (repeatable; default: every built-in; for --target vllm: vllm-adaptive)")
    parser.add_argument("--target", choices=tuple(TARGETS), default=MODEL,
                        help="what executes the ops: the reference model, or vLLM 0.32's real scheduler")
    budget = parser.add_mutually_exclusive_group()
    budget.add_argument("--examples", type=_positive(int), metavar="N", help="Hypothesis examples per policy")
    budget.add_argument("--seconds", type=_positive(float), metavar="S",
                        help=f"seconds per policy (default {DEFAULT_SECONDS:g}; shrinking a counterexample can run past it)")
    parser.add_argument("--seed", type=int, default=0, help="the Hypothesis seed (default 0)")
    parser.add_argument("--corpus", type=Path, metavar="DIR",
                        help="where counterexample traces go (default: a new temp dir); existing files are kept")
    parser.add_argument("--json", action="store_true", help="print one JSON document")


def _positive(kind: type) -> Callable[[str], Any]:
    def parse(text: str) -> Any:
        try:
            value = kind(text)
        except ValueError:
            value = 0
        if value <= 0:
            raise argparse.ArgumentTypeError(f"expected a number > 0, got {text!r}")
        return value
    return parse


def fuzz_command(args: argparse.Namespace, progress: Callable[[str], None],
                 print_json: Callable[[Any], None]) -> int:
    """Run ``fuzz`` for parsed ``args``; the exit status."""
    default = ["vllm-adaptive"] if args.target == VLLM else list(builtin_policies())
    policies: Sequence[str] = list(dict.fromkeys(args.policies)) or default
    for policy in policies:  # unknown policy, vLLM missing, a policy the target cannot run: bad input, now
        TARGETS[args.target](BudgetConfig(), get_policy(policy))
    corpus = args.corpus or Path(tempfile.mkdtemp(prefix="tokenbudget-fuzz-"))
    seconds = None if args.examples else args.seconds or DEFAULT_SECONDS
    reports = [fuzz(p, target_factory=TARGETS[args.target], target_name=args.target, examples=args.examples,
                    seconds=seconds, seed=args.seed, corpus=corpus, progress=progress) for p in policies]
    ok = all(r.ok for r in reports)
    if args.json:
        print_json({"ok": ok, "target": args.target, "corpus": str(corpus),
                    "policies": [{**r.to_json(), "known": sorted(
                        c.kind for c in r.counterexamples if is_known(r.policy, c.kind, c.trace))} for r in reports]})
    else:
        print(render_reports(reports, corpus))
    return OK if ok else FAILED


def render_reports(reports: Sequence[FuzzReport], corpus: Path) -> str:
    """The plain-text summary: one row per policy, then each counterexample with its trace."""
    rows = [[r.policy, str(r.examples), str(r.steps), f"{r.steps_per_second:.0f}", f"{r.seconds:.1f}",
             ", ".join(c.kind for c in r.counterexamples) or "-"] for r in reports]
    lines = table(["policy", "examples", "steps", "steps/s", "seconds", "violated"], rows, right=(1, 2, 3, 4))
    for r in reports:
        for c in r.counterexamples:
            status = "known" if is_known(r.policy, c.kind, c.trace) else "NEW"
            lines.append(f"{r.policy}: {c.kind} ({status}), first seen after {c.first_seen:.1f} s, "
                         f"shrunk to {len(c.trace.ops)} ops")
            lines.append(f"  {c.message}")
            lines += [f"  {path}" for path in c.paths]
    found = sum(len(r.counterexamples) for r in reports)
    lines.append(f"verdict: {'ok: no violation' if not found else f'{found} violations'}  "
                 f"(target {reports[0].target if reports else '-'}, corpus {corpus})")
    return "\n".join(lines)
