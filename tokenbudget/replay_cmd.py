"""``tokenbudget replay``: replay trace files on a target and judge them.

Targets: ``model`` (the reference scheduler), every engine of ``harness.registry`` that
supports replay (its real scheduler with the trace's accepted drafts; one that needs a child
process of its own runs there) and ``runner`` (the reference scheduler with a small torch
model runner executing every step it makes, ``kernels/``). The runner's faults
(InputRowsOverflow, KVOverflow, CUDA out of memory) end the run as target errors, which
fail the verdict. ``add_arguments`` and the usage checks import no torch; the runner is
imported when it runs, so the other commands start without it.

Exit status 0 when every expectation is met and nothing was violated; 1 otherwise, also
for a trace that shows an expected violation, as a failing counterexample should.
"""
from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import Sequence

from . import render
from .args import UsageError, add_json, add_max_work_gap, add_policy, seed, whole, add_sync, apply_sync
from .console import Console
from .engine_path import add_engine_path, announce
from .exits import FAILED, OK
from .harness import registry
from .harness.engine_descriptor import REPLAY
from .kernels.arrivals import MAX_STEPS
from .model import builtin_policies
from .model.replay import BadInput, ReplayResult, preflight, replay_on_model
from .model.base_gap import replay_judged
from .spec.trace import Trace, load_trace
from .targets import MODEL, RUNNER
from .verdict import Judge, Verdict

HELP = "replay trace files and judge them"
DESCRIPTION = None

# dest -> (flag, default): the options that only the runner target reads
RUNNER_ONLY = {"acceptance": ("--acceptance", "greedy"), "model": ("--model", "tiny"), "seed": ("--seed", 0),
               "steps": ("--steps", 0), "memory_cap": ("--memory-cap", False), "plot": ("--plot", None)}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("traces", nargs="+", metavar="TRACE", help="trace file (format tokenbudget.trace/1)")
    engines = registry.names(REPLAY)
    parser.add_argument("--target", choices=(MODEL, RUNNER, *engines), default=MODEL,
                        help="what executes the trace: model, or runner (the model with a torch runner executing "
                             "its steps), or a real engine's scheduler with the trace's accepted drafts: " + "; ".join(
                                 f"{n}, {registry.engine(n).target_help}" for n in engines))
    parser.add_argument("--device", choices=("cpu", "cuda"), help="device of the runner target")
    parser.add_argument("--mode", choices=("forced", "live"),
                        help="mode of the runner target (forced also of a real engine's): forced takes the accepted "
                             "drafts from the trace (default), live lets the runner's verification decide them")
    parser.add_argument("--acceptance", choices=("greedy", "rejection"), default="greedy",
                        help="runner: how the target verifies drafts, greedy match or rejection sampling at "
                             "temperature 1; in live mode it decides the accepted drafts, in forced mode the "
                             "trace does and the runner's rate is only reported (default greedy)")
    parser.add_argument("--model", choices=("tiny", "wide"), default="tiny",
                        help="runner: model sizes; tiny = vocab 256, hidden 64, 4 layers (2 in the early-exit "
                             "drafter), 4 heads, mlp 256; wide = vocab 8192, hidden 1024, 8 heads, mlp 4096, "
                             "for the CUDA memory cap (default tiny)")
    parser.add_argument("--seed", type=seed, default=0, metavar="N",
                        help="runner: seed of the model weights, of sampling and of the --steps arrivals (default 0)")
    parser.add_argument("--steps", type=whole, default=0, metavar="N",
                        help=f"runner: after the trace's ops run N more steps (at most {MAX_STEPS}); before each, a request arrives with "
                             "probability 1/2 (prompt 1-256 tokens, max_tokens 1-32, every other one sharing a "
                             "two-block system prompt), drawn from --seed; in forced mode they accept no draft")
    parser.add_argument("--memory-cap", action="store_true",
                        help="runner, --device cuda: hold the whole KV pool (num_kv_blocks), profile a B-row step, "
                             "cap the CUDA allocator at its peak plus 64 MiB and let steps allocate what they need, "
                             "so a step past B fails with a real CUDA out-of-memory error instead of "
                             "InputRowsOverflow")
    parser.add_argument("--plot", metavar="FILE.png",
                        help="runner: draw the rows of each step, stacked by request, against B (one TRACE; "
                             "never overwrites a file)")
    add_policy(parser, "replay under this policy instead of the trace's (name or pkg.module:Class)", repeatable=False)
    add_max_work_gap(parser)
    add_engine_path(parser)
    add_sync(parser, False)
    add_json(parser)


def run(args: argparse.Namespace, console: Console) -> int:
    apply_sync(args, False)
    problem = _usage_problem(args)
    if problem is not None:
        raise UsageError(problem)
    traces = [load_trace(path) for path in args.traces]
    if args.target == RUNNER:
        return _replay_on_runner(args, traces, console)
    if registry.find(args.target) is not None:
        for trace in traces:  # the user's input is judged before the engine's banner
            preflight(trace, args.policy)
        announce(console, args.target, args.engine_path)
    results: list[ReplayResult] = []
    for n, trace in enumerate(traces, 1):
        def progress(where: str, n: int = n, trace: Trace = trace) -> None:
            console.progress(f"replaying {n}/{len(traces)}: {trace.source}: {where}")

        engine = registry.find(args.target)
        if engine is not None:
            results.append(replay_on_model(trace, args.policy, engine.replay_target(), progress=progress))
        else:
            results.append(replay_judged(trace, args.policy, args.max_work_gap, progress=progress))
    judged = [_judged(trace, result, args) for trace, result in zip(traces, results)]
    ok = all(_passed(r) for r in results)
    if args.json:
        console.json({"ok": ok, "target": args.target,
                      "traces": [{**r.to_json(), "judged": {v.invariant: v.kind for v in j}}
                                 for r, j in zip(results, judged)]})
    else:
        console.text("\n\n".join(render.replay(r, t.description, j) for r, t, j in zip(results, traces, judged)))
    return OK if ok else FAILED


def _judged(trace: Trace, result: ReplayResult, args: argparse.Namespace) -> list[Verdict]:
    """A user policy's verdict on each invariant the replay violated (``tokenbudget.verdict``),
    judged on this run; none for a built-in, whose trace's expectations say what it shows,
    nor on a real engine, whose runs the findings' matchers do not read."""
    policy = args.policy or trace.policy
    if args.target != MODEL or policy in builtin_policies() or result.refusal is not None:
        return []
    return Judge(policy, args.max_work_gap).of_run(trace, result, result.source, gap=False)


def _passed(result: ReplayResult) -> bool:
    return result.ok and not result.violations and not result.errors


def _usage_problem(args: argparse.Namespace) -> str | None:
    """One line saying what is wrong with the target's options, or None."""
    engine = registry.find(args.target)
    if engine is not None and (args.device or args.mode == "live"):
        return f"the {engine.name} target runs {engine.label}'s scheduler on the CPU with the trace's accepted " \
               "drafts; --device and --mode live apply to --target runner"
    if engine is not None and args.max_work_gap:
        return "--max-work-gap judges a user policy against its base on the model and runner targets; " \
               f"drop it for --target {engine.name}"
    if args.target == MODEL and (args.device or args.mode):
        given = ", ".join(flag for flag, value in (("--device", args.device), ("--mode", args.mode)) if value)
        return f"{given}: for --target runner only (--mode forced also for a real engine); the model target " \
               f"takes no device or mode: drop {given} or add --target runner"
    if args.target != RUNNER:
        given = [flag for dest, (flag, default) in RUNNER_ONLY.items() if getattr(args, dest) != default]
        if not given:
            return None
        flags, one = ", ".join(given), len(given) == 1
        return f"{flags} {'applies' if one else 'apply'} only to --target runner; drop {'it' if one else 'them'} " \
               "or add --target runner"
    if args.steps > MAX_STEPS:
        return f"--steps {args.steps} is more than the runner target runs ({MAX_STEPS}); lower --steps"
    if args.memory_cap and args.device != "cuda":
        return "--memory-cap caps the CUDA allocator; add --device cuda"
    if args.plot is not None:
        if Path(args.plot).suffix.lower() != ".png":
            return f"--plot {args.plot}: the plot is a PNG image; name the file with the suffix .png"
        if len(args.traces) != 1:
            return f"--plot draws one trace, got {len(args.traces)}; give one TRACE"
        if os.path.lexists(args.plot):
            return f"{args.plot} exists; --plot never overwrites a file, choose a new name"
        folder = Path(args.plot).resolve().parent
        if not folder.is_dir():
            return f"cannot write {args.plot}: no folder {folder}"
    if args.device == "cuda":
        import torch  # only here: the check needs it, and the runner will import it anyway

        if not torch.cuda.is_available():
            build = "a CPU-only build" if torch.version.cuda is None else f"built for CUDA {torch.version.cuda}"
            return (f"--device cuda: no CUDA device is available (torch {torch.__version__}, {build}); "
                    f"run on a machine with an NVIDIA GPU and a CUDA build of torch, or use --device cpu")
    return None


def _replay_on_runner(args: argparse.Namespace, traces: Sequence[Trace], console: Console) -> int:
    from .kernels.arrivals import extend
    from .kernels.plot import plot_rows
    from .kernels.replay import replay_on_runner
    from .kernels.target import RunnerOptions

    options = RunnerOptions(device=args.device or "cpu", mode=args.mode or "forced", rule=args.acceptance,
                            model=args.model, seed=args.seed, memory_cap=args.memory_cap)
    if options.device == "cpu":
        import torch

        torch.set_num_threads(1)  # the models are tiny: handing each op to a second thread costs more than it saves
    runs = []
    for n, trace in enumerate(traces, 1):
        console.progress(f"replaying {n}/{len(traces)} on the runner: {trace.source}")
        if args.steps:
            trace = extend(trace, args.steps, args.seed)
        result, target = replay_on_runner(trace, options, args.policy, args.max_work_gap)
        runs.append((trace, result, target.report if target else None))
    if args.plot is not None:
        trace, result, report = runs[0]
        if report is None or not report.steps:
            raise BadInput(f"{trace.source}: nothing to plot, no step ran (config refused: {result.refusal})")
        with open(args.plot, "xb") as out:
            plot_rows(report, out, f"{Path(trace.source).name}: {result.policy} on the runner "
                                   f"({options.mode}, {options.device})")
    ok = all(_passed(r) for _, r, _ in runs)
    if args.json:
        console.json({"ok": ok, "target": RUNNER, "device": options.device, "mode": options.mode,
                      "traces": [{**r.to_json(), "runner": rep.to_json() if rep else None} for _, r, rep in runs]})
    else:
        console.text("\n\n".join(render.replay(r, t.description) + (f"\n{render.runner(rep)}" if rep else "")
                                 for t, r, rep in runs))
    return OK if ok else FAILED
