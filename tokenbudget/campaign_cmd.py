"""``tokenbudget campaign``: fuzz for hours on every core, resumable (``fuzz.campaign``).

The campaign's folder (``--out``) holds its state, its report (``report.json`` and the
plot ``report.png``, rewritten as it runs) and its corpus; running the same command again
continues it. Ctrl-C ends it with the report so far (exit 130). Exit status 1 when something
was violated, 4 when nothing was but the campaign ran under its target's floor of examples and
steps (``tokenbudget.evidence``: "no evidence", never ok), else 0, as ``fuzz``.
"""
from __future__ import annotations

import argparse
import os
from pathlib import Path

from . import render
from .args import add_database, add_json, add_max_work_gap, add_policy, folder, positive_float, positive_int
from .console import Console
from .evidence import NO_EVIDENCE, floor_of, shortfall
from .exits import FAILED, INTERRUPTED, NO_EVIDENCE as NO_EVIDENCE_EXIT, OK
from .fuzz.campaign import Campaign, report_json, run_campaign
from .fuzz.database import open_database
from .fuzz_cmd import add_target, target_factory
from .harness import registry
from .harness.engine_descriptor import CAMPAIGN
from .model import BudgetConfig, builtin_policies, get_policy
from .spec.user_paths import writable_folder

HELP = "fuzz for hours on every core; resumable, with a periodic report"
DESCRIPTION = ("Fuzz every policy chosen on worker processes for --hours, round after round, sharing one "
               "example database; each violation becomes a trace in OUT/corpus. OUT/report.json and "
               "OUT/report.png (steps/s and rare-path coverage over time) are rewritten as it runs. Run "
               "the same command again to continue a stopped campaign. Exit 1 when something was violated, "
               "4 (no evidence) when nothing was but too little ran, 0 when nothing was, 130 when interrupted.")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--hours", type=positive_float, required=True, metavar="H",
                        help="how long the campaign runs, all its runs together (fractions allowed)")
    parser.add_argument("--workers", type=positive_int, default=os.cpu_count() or 1, metavar="N",
                        help="worker processes (default: the cores, %(default)s here)")
    add_database(parser)
    parser.add_argument("--out", type=folder, default=Path("tokenbudget-campaign"), metavar="DIR",
                        help="the campaign's folder: state, report, corpus (default: %(default)s)")
    add_policy(parser, "fuzz this policy (repeatable; default: every built-in on the model; on a real engine the "
                       "policy its release maps to)")
    add_target(parser, CAMPAIGN)
    parser.add_argument("--seed", type=int, default=0,
                        help="the seed the workers' streams derive from (default 0; a resumed campaign keeps its own)")
    add_max_work_gap(parser)
    add_json(parser)


def run(args: argparse.Namespace, console: Console) -> int:
    engine = registry.find(args.target)
    policies = tuple(dict.fromkeys(args.policies))
    if not policies:
        policies = tuple(builtin_policies()) if engine is None else (engine.modelled(None).policy,)
    factory = target_factory(args.target)
    writable_folder(args.out, "--out")  # before any work
    for policy in policies:  # unknown policy, the engine missing, a policy the target cannot run: bad input, now
        if engine is None:
            factory(BudgetConfig(), get_policy(policy))
        else:
            engine.check_policy(get_policy(policy))
    open_database(args.database)
    campaign = Campaign(args.out, args.hours, policies, factory, args.target, args.workers, args.database, args.seed,
                        args.max_work_gap, "" if engine is None else engine.identity(None))
    state, interrupted = run_campaign(campaign, lambda live: console.progress(render.live(live)))
    short = None if state.violations else shortfall(state.examples, state.steps, floor_of(args.target))
    doc = {**report_json(campaign, state, running=False), "no_evidence": short}
    if args.json:
        console.json({**doc, "ok": not state.violations and short is None, "interrupted": interrupted,
                      "verdict": "FAIL" if state.violations else NO_EVIDENCE if short else "ok"})
    else:
        console.text(render.campaign(doc, interrupted))
    return INTERRUPTED if interrupted else FAILED if state.violations else NO_EVIDENCE_EXIT if short else OK
