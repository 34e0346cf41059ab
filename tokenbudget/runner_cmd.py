"""``tokenbudget replay --target runner``: replay traces on the torch runner (``kernels/``).

The runner target is the reference scheduler with a small real model runner executing
every step it makes; its faults (InputRowsOverflow, KVOverflow, CUDA out of memory)
end the run as target errors, which replay reports and which fail the verdict.
``add_arguments`` and ``usage_problem`` import no torch; ``replay_command`` imports the
runner when it runs, so the other commands start without it.
"""
from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Sequence

from . import render
from .model.replay import BadInput, ReplayResult
from .spec.trace import Trace
from .exits import FAILED, OK
from .targets import RUNNER

if TYPE_CHECKING:
    from .kernels.report import RunnerReport
    from .kernels.target import RunnerOptions

# dest -> (flag, default): the options that only the runner target reads
RUNNER_ONLY = {"acceptance": ("--acceptance", "greedy"), "model": ("--model", "tiny"), "seed": ("--seed", 0),
               "steps": ("--steps", 0), "memory_cap": ("--memory-cap", False), "plot": ("--plot", None)}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The runner target's options of ``replay``."""
    parser.add_argument("--acceptance", choices=("greedy", "rejection"), default="greedy",
                        help="runner: how the target verifies drafts, greedy match or rejection sampling at "
                             "temperature 1; in live mode it decides the accepted drafts, in forced mode the "
                             "trace does and the runner's rate is only reported (default greedy)")
    parser.add_argument("--model", choices=("tiny", "wide"), default="tiny",
                        help="runner: model sizes; tiny = vocab 256, hidden 64, 4 layers (2 in the early-exit "
                             "drafter), 4 heads, mlp 256; wide = vocab 8192, hidden 1024, 8 heads, mlp 4096, "
                             "for the CUDA memory cap (default tiny)")
    parser.add_argument("--seed", type=_whole, default=0, metavar="N",
                        help="runner: seed of the model weights, of sampling and of the --steps arrivals (default 0)")
    parser.add_argument("--steps", type=_whole, default=0, metavar="N",
                        help="runner: after the trace's ops run N more steps; before each, a request arrives with "
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


def _whole(text: str) -> int:
    """An argparse type: an integer >= 0."""
    if not text.isdigit():
        raise argparse.ArgumentTypeError(f"expected a whole number >= 0, got {text!r}")
    return int(text)


def usage_problem(args: argparse.Namespace, num_traces: int) -> str | None:
    """One line saying what is wrong with the runner options of ``replay``, or None."""
    if args.target != RUNNER:
        given = [flag for dest, (flag, default) in RUNNER_ONLY.items() if getattr(args, dest) != default]
        return f"{', '.join(given)} only apply to --target runner" if given else None
    if args.memory_cap and args.device != "cuda":
        return "--memory-cap caps the CUDA allocator; add --device cuda"
    if args.plot is not None:
        if num_traces != 1:
            return f"--plot draws one trace, got {num_traces}; give one TRACE"
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


def replay_command(args: argparse.Namespace, traces: Sequence[Trace], progress: Callable[[str], None],
                   print_json: Callable[[Any], None]) -> int:
    """Replay each trace on the runner target; print the verdicts; the exit status."""
    from .kernels.plot import plot_rows
    from .kernels.replay import replay_on_runner
    from .kernels.target import RunnerOptions
    from .kernels.arrivals import extend

    options = RunnerOptions(device=args.device or "cpu", mode=args.mode or "forced", rule=args.acceptance,
                            model=args.model, seed=args.seed, memory_cap=args.memory_cap)
    if options.device == "cpu":
        import torch

        torch.set_num_threads(1)  # the models are tiny: handing each op to a second thread costs more than it saves
    runs: list[tuple[Trace, ReplayResult, RunnerReport | None]] = []
    for n, trace in enumerate(traces, 1):
        progress(f"replaying {n}/{len(traces)} on the runner: {trace.source}")
        if args.steps:
            trace = extend(trace, args.steps, args.seed)
        result, target = replay_on_runner(trace, options, args.policy)
        runs.append((trace, result, target.report if target else None))
    if args.plot is not None:
        trace, result, report = runs[0]
        if report is None or not report.steps:
            raise BadInput(f"{trace.source}: nothing to plot, no step ran (config refused: {result.refusal})")
        with open(args.plot, "xb") as out:
            plot_rows(report, out, f"{Path(trace.source).name}: {result.policy} on the runner "
                                   f"({options.mode}, {options.device})")
    # As for the model: a trace that shows a violation or a runner fault exits 1, even when expected.
    ok = all(r.ok and not r.violations and not r.errors for _, r, _ in runs)
    if args.json:
        print_json({"ok": ok, "target": RUNNER, "device": options.device, "mode": options.mode,
                    "traces": [{**r.to_json(), "runner": rep.to_json() if rep else None} for _, r, rep in runs]})
    else:
        print("\n\n".join(render.replay(r, t.description) + (f"\n{render_runner(rep)}" if rep else "")
                          for t, r, rep in runs))
    return OK if ok else FAILED


def render_runner(report: RunnerReport) -> str:
    """The runner's part of a replay: one line per step, the acceptance, throughput, verdict."""
    mib = 2**20
    lines = [f"runner  {report.device}, {report.mode} mode, {report.rule} acceptance; {report.model.describe()}"]
    if report.memory_cap:
        cap = report.memory_cap
        lines.append(f"        CUDA allocator capped at {cap.cap_bytes / mib:.0f} MiB (baseline "
                     f"{cap.baseline_bytes / mib:.0f} MiB, B-row profile peak +{cap.profile_peak_bytes / mib:.0f} MiB)")
    cuda = any(s.peak_bytes is not None for s in report.steps)
    header = ["step", "rows/B", "kv blocks", "ms", *(["peak MiB"] if cuda else []), "runner"]
    rows = [[str(s.step), f"{s.total_rows}/{s.capacity}", f"{s.kv_blocks}/{s.kv_pool}", f"{s.seconds * 1e3:.1f}",
             *([f"{(s.peak_bytes or 0) / mib:.1f}"] if cuda else []), s.fault.split(":")[0] if s.fault else "ok"]
            for s in report.steps]
    lines += ["  " + line for line in render.table(header, rows, right=tuple(range(len(header) - 1)))]
    if report.acceptance is not None:
        verified = sum(s.verified for s in report.steps)
        note = "; the trace set the acceptance applied" if report.mode == "forced" else ""
        lines.append(f"acceptance: {report.acceptance:.2f} ({sum(s.matched for s in report.steps)}/{verified} drafts "
                     f"by the runner's {report.rule} rule{note})")
    scheduled, committed = report.throughput()
    lines.append(f"throughput: {scheduled:.0f} scheduled tokens/s, {committed:.0f} committed tokens/s")
    lines.append(f"runner verdict: {report.fault or 'ok'}")
    return "\n".join(lines)
