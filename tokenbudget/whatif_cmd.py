"""``tokenbudget whatif``: what budget policies cost in latency on one workload, predicted
by the reference scheduler on a cost model's virtual clock (``tokenbudget.whatif``)."""
from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from .args import UsageError, add_json, add_policy, at_most, positive_float, positive_int, seed, whole
from .console import Console
from .exits import FAILED, OK
from .model import BudgetConfig, ConfigError, builtin_policies, get_policy
from .spec.user_paths import writable_folder
from .whatif import cost_file, effective_budget, metrics, report, simulator, workload

HELP = "predict what budget policies cost in latency (TTFT, TPOT, ITL) on a workload"
DESCRIPTION = ("Runs a workload on the reference scheduler under each --policy, every policy on the same random "
               "draws, and charges each step what a cost model says it takes. Prints TTFT, TPOT and inter-token "
               "latency percentiles, throughput and tokens per step, and the effective budget of each policy.")
DEFAULT_POLICIES = ("vllm-static", "vllm-adaptive")
RUNNING = (1, 32, 128, 1024)
CHANGE_CONFIG = BudgetConfig(max_num_batched_tokens=8192, max_num_seqs=1024, num_speculative_tokens=7, method="dspark",
                             engine_version="0.32", max_model_len=16384, num_kv_blocks=2**20,
                             enable_prefix_caching=False)  # synthetic prompts share no prefix
MAX_REQUESTS = 1_000_000  # requests (or clients) in one run: past any benchmark
TTFT_TOLERANCE_PCT = 15.0
CHANGE_TOLERANCE_POINTS = 5.0
WHATIF_ERRORS = (workload.WorkloadError, cost_file.CostFileError, simulator.SimulationError)


def _counts(text: str) -> tuple[int, ...]:
    try:
        return tuple(at_most(positive_int, MAX_REQUESTS)(x) for x in text.split(","))
    except argparse.ArgumentTypeError:
        raise argparse.ArgumentTypeError(f"expected comma-separated numbers 1..{MAX_REQUESTS:,}, got {text[:40]!r}") \
            from None


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_policy(parser, f"a policy to compare (repeatable; default {' and '.join(DEFAULT_POLICIES)})")
    g = parser.add_argument_group("engine config (default: the budget change's: B 8192, S 1024, DSpark k=7 on the "
                                  "method table of engine version 0.32; with --calibrate: B 256, S 32, "
                                  "max_model_len 2048)")
    g.add_argument("--max-num-batched-tokens", type=positive_int, metavar="B")
    g.add_argument("--max-num-seqs", type=positive_int, metavar="S")
    g.add_argument("--num-speculative-tokens", "-k", type=whole, metavar="K")
    g.add_argument("--method", help="speculative method (none with -k 0)")
    g.add_argument("--engine-version", help="the engine version of the method table")
    g.add_argument("--max-model-len", type=positive_int)
    g.add_argument("--num-kv-blocks", type=positive_int)
    w = parser.add_argument_group("workload")
    w.add_argument("--requests", type=at_most(positive_int, MAX_REQUESTS), default=64,
                   help="requests per run (default %(default)s)")
    w.add_argument("--concurrency", type=_counts, default=(1, 4, 16), metavar="C[,C...]",
                   help="clients in flight, one run per value (default 1,4,16)")
    w.add_argument("--rate", type=positive_float, help="Poisson arrivals per second (default: all at once)")
    w.add_argument("--prompt-len", default="8000", metavar="N|LOW:HIGH")
    w.add_argument("--output-len", default="256", metavar="N|LOW:HIGH")
    w.add_argument("--acceptance", default="0.8,0.7,0.6,0.5,0.4,0.3,0.2", metavar="P1,P2,...",
                   help="per-position acceptance rates (draft i accepted given the earlier ones)")
    w.add_argument("--seed", type=seed, default=0)
    parser.add_argument("--cost-model", default="kimi-k2-h100x8", metavar="FILE|NAME",
                        help=f"a cost-model file, or a shipped one: {', '.join(cost_file.shipped())}")
    parser.add_argument("--effective-budget", action="store_true",
                        help=f"print only the effective budget of every built-in policy at {RUNNING} running")
    parser.add_argument("--plot", type=Path, metavar="DIR", help="write the plots into DIR (matplotlib)")
    t = parser.add_argument_group("traces")
    t.add_argument("--trace", type=Path, metavar="FILE",
                   help="time a trace (a finding's, say) under its policy and each --policy: each request's TTFT")
    t.add_argument("--search", type=at_most(positive_int, 100_000), metavar="N",
                   help="search N workloads for the one whose mean TTFT is most longer under the first --policy "
                        "than under the second (Hypothesis target()), written as a trace to --trace-out")
    t.add_argument("--trace-out", type=Path, default=Path("whatif-search.json"), metavar="FILE",
                   help="where --search writes its trace (default %(default)s)")
    c = parser.add_argument_group("calibration on the torch runner")
    c.add_argument("--calibrate", type=Path, metavar="FILE",
                   help="run the runner's model on the designed workloads and, interleaved with them, on held-out "
                        "ones at each --concurrency; fit the cost model on the designed ones into FILE and set the "
                        "runner's measured median TTFT beside the prediction (exit 1 "
                        f"when one misses by more than {TTFT_TOLERANCE_PCT:g}% or a change by more than "
                        f"{CHANGE_TOLERANCE_POINTS:g} points)")
    c.add_argument("--device", default="cpu", choices=("cpu", "cuda"), help="the runner's device (default cpu)")
    c.add_argument("--runner-model", default="tiny", choices=("tiny", "wide"), help="the runner's model")
    c.add_argument("--clock", choices=("wall", "cpu"),
                   help="time the runner's steps by wall clock, or by this thread's CPU time, which other processes "
                        "on a shared machine do not inflate (default: cpu on the CPU, wall on CUDA)")
    add_json(parser)


def engine_config(args: argparse.Namespace, base: BudgetConfig) -> BudgetConfig:
    """``base`` with the knobs the command line set."""
    knobs = {name: getattr(args, name) for name in ("max_num_batched_tokens", "max_num_seqs", "num_speculative_tokens",
                                                    "method", "engine_version", "max_model_len", "num_kv_blocks")}
    changes = {name: value for name, value in knobs.items() if value is not None}
    if changes.get("method") in ("", "none") or changes.get("num_speculative_tokens") == 0:
        changes["method"] = None
    if changes.get("engine_version") == "":
        changes["engine_version"] = None
    return base.replace(**changes)


def run(args: argparse.Namespace, console: Console) -> int:
    try:
        return _run(args, console)
    except WHATIF_ERRORS as e:
        raise UsageError(str(e)) from None


def _run(args: argparse.Namespace, console: Console) -> int:
    if args.calibrate is not None:
        writable_folder(args.calibrate.parent, "--calibrate")  # before minutes of work, not after
        return _calibrate(args, console)
    if args.plot is not None:
        writable_folder(args.plot, "--plot")
    if args.trace is not None:
        return _time_trace(args, console)
    cfg = engine_config(args, CHANGE_CONFIG)
    if args.search is not None:
        writable_folder(args.trace_out.parent, "--trace-out")
        return _search(args, cfg, console)
    if args.effective_budget:
        budgets = effective_budget.budgets_by_policy(cfg, {n: c() for n, c in builtin_policies().items()}, RUNNING)
        console.json({"config": cfg.to_dict(), "effective_budget": budgets}) if args.json else \
            console.text(report.budget_table(budgets, RUNNING))
        return OK
    names = args.policies or list(DEFAULT_POLICIES)
    policies = {name: get_policy(name) for name in names}
    cost = cost_file.load(Path(args.cost_model))
    runs, results = [], []
    for conc in args.concurrency:
        load = workload.synthetic(args.requests, conc, args.rate, workload.Lengths.parse(args.prompt_len, "--prompt-len"),
                                  workload.Lengths.parse(args.output_len, "--output-len"),
                                  workload.parse_acceptance(args.acceptance), args.seed)
        for name, policy in policies.items():
            def progress(done: int, total: int, name: str = name, conc: int = conc) -> None:
                console.progress(f"whatif: {name} at concurrency {conc}: {done}/{total} requests finished")
            result = simulator.simulate(effective_budget.config_for(cfg, policy), policy, load, cost, progress)
            results.append((conc, result))
            runs.append({"concurrency": conc, "summary": metrics.summarise(result)})
    budgets = effective_budget.budgets_by_policy(cfg, policies, RUNNING)
    doc: dict[str, Any] = {"config": cfg.to_dict(), "cost_model": cost_file.describe(cost), "runs": runs,
                           "effective_budget": budgets}
    if args.plot is not None:
        from .whatif import plots  # matplotlib loads only for --plot
        doc["plots"] = [str(p) for p in plots.write_all(results, args.plot)]
    if args.json:
        console.json(doc)
    else:
        console.text(report.latency_table(runs) + "\n\neffective budget (tokens a pass can grant with R running)\n"
                     + report.budget_table(budgets, RUNNING))
    return OK


def _calibrate(args: argparse.Namespace, console: Console) -> int:
    from . import whatif_runner  # torch loads only for --calibrate
    from .kernels.target import RunnerOptions
    cfg = engine_config(args, whatif_runner.RUNNER_CONFIG)
    options = RunnerOptions(device=args.device, model=args.runner_model, seed=args.seed)
    clock = args.clock or ("cpu" if args.device == "cpu" else "wall")
    if clock == "cpu" and args.device == "cuda":
        raise UsageError("--clock cpu cannot time a CUDA device's work; use --clock wall with --device cuda")
    import torch
    if args.device == "cuda" and not torch.cuda.is_available():
        raise UsageError("--device cuda: this machine has no CUDA device; calibrate with --device cpu")
    cost, quality, rows = whatif_runner.calibrate_and_validate(cfg, options, args.concurrency, args.seed,
                                                               args.seed + 1000, clock, console.progress)
    cost_file.save(cost, args.calibrate)
    met = all(abs(r[p]["error_pct"]) <= TTFT_TOLERANCE_PCT for r in rows for p in whatif_runner.POLICIES) and all(
        abs(r["predicted_change_pct"] - r["measured_change_pct"]) <= CHANGE_TOLERANCE_POINTS for r in rows)
    if args.json:
        console.json({"cost_model": cost.to_dict(), "fit": quality, "clock": clock, "validation": rows,
                      "within_targets": met})
    else:
        console.text(f"cost model written to {args.calibrate}: {quality['steps']} steps, per-step error median "
                     f"{quality['median_step_error']:.0%}, p90 {quality['p90_step_error']:.0%}\n"
                     + report.validation_table(rows, whatif_runner.POLICIES) + f", {clock} clock")
    return OK if met else FAILED


def _time_trace(args: argparse.Namespace, console: Console) -> int:
    from .spec.trace import load_trace
    from .whatif.trace_delay import time_trace
    trace = load_trace(args.trace)
    cfg = BudgetConfig.from_dict(trace.config)
    cost = cost_file.load(Path(args.cost_model))
    names = list(dict.fromkeys([trace.policy, *args.policies]))
    runs: list[dict[str, Any]] = []
    for name in names:
        policy = get_policy(name)
        try:
            t = time_trace(trace, effective_budget.config_for(cfg, policy), policy, cost)
        except ConfigError as e:
            runs.append({"policy": name, "refused": str(e)})
            continue
        runs.append({"policy": name, "seconds": t.seconds, "error": t.error,
                     "requests": {rid: {"added_s": r.added_s, "ttft_s": r.ttft_s, "finish_s": r.finish_s}
                                  for rid, r in t.requests.items()}})
    doc = {"trace": str(args.trace), "cost_model": cost_file.describe(cost), "runs": runs}
    if args.json:
        console.json(doc)
    else:
        console.text(report.trace_table(doc["runs"]))
    return OK


def _search(args: argparse.Namespace, cfg: BudgetConfig, console: Console) -> int:
    from .spec.trace import write_trace
    from .whatif.search import search
    names = args.policies or list(DEFAULT_POLICIES)
    if len(names) != 2:
        raise UsageError(f"--search compares two policies (the slower first), got {len(names)}; give --policy twice")
    slow, fast = (get_policy(n) for n in names)
    cost = cost_file.load(Path(args.cost_model))
    found, trace = search(effective_budget.config_for(cfg, slow), slow, fast, cost,
                          workload.parse_acceptance(args.acceptance), args.search, args.seed)
    write_trace(trace, args.trace_out)
    requests = found.workload.requests if found.workload else ()
    doc = {"gap_ttft_s": found.gap_s, "trace": str(args.trace_out),
           "workload": [{"arrival_s": r.arrival_s, "prompt_len": r.prompt_len, "output_len": r.output_len}
                        for r in requests], "concurrency": found.workload.concurrency if found.workload else None}
    if args.json:
        console.json(doc)
    else:
        console.text(f"mean TTFT {found.gap_s * 1000:.1f} ms longer under {names[0]} than {names[1]} on "
                     f"{len(requests)} requests (prompts {[r.prompt_len for r in requests]}); "
                     f"trace written to {args.trace_out}")
    return OK
