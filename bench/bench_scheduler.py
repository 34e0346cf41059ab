"""Benchmark: CPU time per step of the reference scheduler against the real vLLM scheduler.

Run after ``pip install -e .``::

    python bench/bench_scheduler.py [--requests 8 64 256 512 4096] [--rounds 3] [--steps 100] [--seed N]
                                    [--side all|both|model|columnar|vllm] [--json]

The standard workload (deterministic from ``--seed``): B=8192, S=256, ngram with k=4 and
parallel drafting (d=3), N requests added at the start with prompt lengths uniform in
[50, 400] and max_tokens uniform in [20, 200], then up to ``--steps`` step ops, for each N
of ``--requests`` (the cost's growth with the queue). It is generated once as trace-format
ops and replayed on each side. Acceptance: each step op carries, for every request, the
number of leading successes among k Bernoulli(0.6) trials; a target clips it to the drafts
it scheduled, so both sides accept the same whatever either scheduled.

A side stops at the first step that schedules nothing. Each round runs both sides on a
fresh scheduler, in alternating order (model first in even rounds), so a machine whose
load changes meets both alike; times are CPU seconds of this process (``process_time``),
per step, and the minimum and median over rounds are reported. The model's step is its
scalar ``schedule`` + ``check_step`` + ``update_from_output`` (``columnar_min_running`` None);
the columnar side is the model as ``scheduler_for`` builds it, which takes the columnar
step (``tokenbudget/model/vllm/columnar.py``) from ``MIN_RUNNING`` running requests on, judged by
``check_step_columnar``. Untimed, once per size, the two models run in lockstep and every
record, outcome and verdict of the columnar one is compared with the scalar one's
(``columnar_agreement``). The columnar goal is 3x vLLM's own step at 256 and 4,096 requests. vLLM's is split into its own
``Scheduler.schedule`` + ``update_from_output`` (what the ratio is taken against),
``update_draft_token_ids``, and the harness (the fake model runner and the observation
tokenbudget builds), each timed around the call. Construction and adds are not timed. The
harness goal: its own cost at most half of vLLM's own schedule + update at 512 and 4,096
requests (``harness_over_own``), every step granting as the model's does (``agreement``).

Exit status: 0 when every requested side ran; 2 when the one side asked for cannot run,
or no side of ``all`` or ``both`` can (one line on stderr).
"""
from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

CONFIG: dict[str, Any] = {
    "max_num_batched_tokens": 8192,
    "max_num_seqs": 256,
    "num_speculative_tokens": 4,
    "method": "ngram",
    "parallel_drafting": True,
}
POLICY = "vllm-adaptive"
REQUESTS = (8, 64, 256, 512, 4096)
PROMPT_LEN = (50, 400)
MAX_TOKENS = (20, 200)
ACCEPT_P = 0.6
GOAL_RATIO = 10.0
COLUMNAR_GOAL = (3.0, (256, 4096))  # the columnar step's ratio over vLLM's own, at these sizes
HARNESS_GOAL = (0.5, (512, 4096))  # the vLLM harness's own cost over vLLM's own step, at most, at these sizes
MODEL_PARTS = ("schedule", "checks", "update")
VLLM_PARTS = ("schedule", "update", "drafts", "harness")
VLLM_OWN = ("schedule", "update")  # the ratio's denominator

Op = dict[str, Any]
Grants = dict[str, int]


def generate_ops(seed: int, num_requests: int, steps: int) -> list[Op]:
    """The standard workload as trace ops: ``num_requests`` adds, then ``steps`` step ops."""
    rng = random.Random(seed)
    ops: list[Op] = [
        {"op": "add", "id": str(i), "prompt_len": rng.randint(*PROMPT_LEN), "max_tokens": rng.randint(*MAX_TOKENS)}
        for i in range(num_requests)
    ]
    k = CONFIG["num_speculative_tokens"]
    for _ in range(steps):
        accepted = {}
        for i in range(num_requests):
            trials = [rng.random() < ACCEPT_P for _ in range(k)]  # always k: no side shifts the stream
            n = trials.index(False) if False in trials else k  # leading successes
            if n:
                accepted[str(i)] = n
        ops.append({"op": "step", "accepted": accepted})
    return ops


@dataclass
class SideRun:
    """One side's run: CPU seconds per part summed over its steps, and each step's grants."""

    parts: dict[str, float]
    grants: list[Grants] = field(default_factory=list)
    violations: int | None = None

    def ms_per_step(self, parts: tuple[str, ...]) -> float:
        return 1000 * sum(self.parts[p] for p in parts) / max(1, len(self.grants))


class Unavailable(Exception):
    """A side cannot run here; the message says why."""


def timed(parts: dict[str, float], part: str, call: Callable[..., Any]) -> Callable[..., Any]:
    """``call``, its CPU time added to ``parts[part]``."""
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        t0 = time.process_time()
        try:
            return call(*args, **kwargs)
        finally:
            parts[part] += time.process_time() - t0
    return wrapper


def run_model(ops: list[Op], columnar: bool = False) -> SideRun:
    """Replay ``ops`` on the reference scheduler, checking every step's invariants: the scalar
    step and ``check_step``, or (``columnar``) the step ``scheduler_for`` picks and
    ``check_step_columnar``."""
    try:
        from tokenbudget.model import BudgetConfig, get_policy, scheduler_for
        from tokenbudget.spec import check_step
        from tokenbudget.spec.columnar_checks import check_step_columnar
    except ImportError as exc:
        raise Unavailable(f"the reference model is not importable: {exc}") from None
    sched = scheduler_for(BudgetConfig.from_dict(CONFIG), get_policy(POLICY))
    if not columnar:
        sched.columnar_min_running = None
    run = SideRun(dict.fromkeys(MODEL_PARTS, 0.0), violations=0)
    schedule = timed(run.parts, "schedule", sched.schedule)
    checks = timed(run.parts, "checks", check_step_columnar if columnar else check_step)
    update = timed(run.parts, "update", sched.update_from_output)

    def step(accepted: Mapping[str, int]) -> Grants:
        record = schedule()
        run.violations = (run.violations or 0) + len(checks(record))
        update(record, accepted=dict(accepted))
        return record.num_scheduled_tokens

    _replay(ops, lambda op: sched.add_request(op["id"], op["prompt_len"], op["max_tokens"]), step, run)
    return run


def run_vllm(ops: list[Op]) -> SideRun:
    """Replay ``ops`` on the real vLLM scheduler, its own calls timed apart from the harness."""
    from tokenbudget.harness.vllm.engine import EngineUnavailable, VllmEngine
    from tokenbudget.model.config import BudgetConfig

    try:
        engine = VllmEngine(BudgetConfig.from_dict(CONFIG))
    except EngineUnavailable as exc:
        raise Unavailable(str(exc)) from None
    run = SideRun(dict.fromkeys(VLLM_PARTS, 0.0))
    sched = engine.scheduler
    sched.schedule = timed(run.parts, "schedule", sched.schedule)  # the harness calls the instance's attributes
    sched.update_from_output = timed(run.parts, "update", sched.update_from_output)
    sched.update_draft_token_ids = timed(run.parts, "drafts", sched.update_draft_token_ids)

    def step(accepted: Mapping[str, int]) -> Grants:
        t0 = time.process_time()
        observed = engine.step(accepted)
        run.parts["harness"] += time.process_time() - t0
        if observed.record.error:
            raise RuntimeError(f"vLLM failed at step {len(run.grants)}: {observed.record.error}")
        return observed.record.num_scheduled_tokens

    _replay(ops, lambda op: engine.add(op["id"], op["prompt_len"], op["max_tokens"]), step, run)
    run.parts["harness"] -= sum(run.parts[p] for p in VLLM_PARTS if p != "harness")  # what is left of a step
    return run


def _replay(ops: list[Op], add: Callable[[Op], None], step: Callable[[Mapping[str, int]], Grants],
            run: SideRun) -> None:
    """Apply the add ops, then the step ops until one schedules nothing (that step's time is dropped)."""
    for op in ops:
        if op["op"] == "add":
            add(op)
    for op in ops:
        if op["op"] != "step":
            continue
        before = dict(run.parts)
        grants = step(op["accepted"])
        if not grants:
            run.parts.update(before)
            break
        run.grants.append(grants)


def agreement(a: list[Grants], b: list[Grants]) -> dict[str, Any]:
    """How many steps both sides granted identically; the first step where they differ."""
    same = [x == y for x, y in zip(a, b)]
    differs = [i for i, ok in enumerate(same) if not ok]
    if len(a) != len(b):
        differs.append(min(len(a), len(b)))
    return {
        "agreeing_steps": sum(same),
        "compared_steps": max(len(a), len(b)),
        "first_disagreement": min(differs, default=None),
    }


def columnar_agreement(ops: list[Op]) -> dict[str, Any]:
    """Untimed: the scalar and the columnar model in lockstep on ``ops``, until a step grants
    nothing; how many steps the columnar one recorded, judged (``check_step_columnar``
    against ``check_step``) and updated exactly as the scalar one, and the first that differs."""
    from tokenbudget.model import BudgetConfig, get_policy, scheduler_for
    from tokenbudget.spec import check_step
    from tokenbudget.spec.columnar_checks import check_step_columnar

    scalar, columnar = (scheduler_for(BudgetConfig.from_dict(CONFIG), get_policy(POLICY)) for _ in range(2))
    scalar.columnar_min_running = None
    for op in ops:
        if op["op"] == "add":
            for sched in (scalar, columnar):
                sched.add_request(op["id"], op["prompt_len"], op["max_tokens"])
    equal = compared = went_columnar = 0
    first = None
    for op in ops:
        if op["op"] != "step":
            continue
        a, b = scalar.schedule(), columnar.schedule()
        went_columnar += columnar.columnar_memo.last is not None
        same = a == b and check_step(a) == check_step_columnar(b)
        same = scalar.update_from_output(a, dict(op["accepted"])) == columnar.update_from_output(b, dict(op["accepted"])) \
            and same
        compared += 1
        equal += same
        first = compared - 1 if first is None and not same else first
        if not a.num_scheduled_tokens:
            break
    return {"equal_steps": equal, "compared_steps": compared, "first_difference": first,
            "columnar_steps": went_columnar}


def spread(values: list[float], digits: int = 3) -> dict[str, float]:
    return {"min": round(min(values), digits), "median": round(statistics.median(values), digits)}


def measure(num_requests: int, args: argparse.Namespace, sides: list[str],
            unavailable: dict[str, str]) -> dict[str, Any]:
    """Every round of one workload size: per side and part, ms/step (min, median)."""
    ops = generate_ops(args.seed, num_requests, args.steps)
    runners = {"model": run_model, "columnar": lambda o: run_model(o, columnar=True), "vllm": run_vllm}
    runs: dict[str, list[SideRun]] = {side: [] for side in sides}
    for index in range(args.rounds):
        for side in sides if index % 2 == 0 else sides[::-1]:
            if side in unavailable:
                continue
            try:
                runs[side].append(runners[side](ops))
            except Unavailable as exc:
                unavailable[side] = str(exc)
    out: dict[str, Any] = {"requests": num_requests, "sides": {}}
    for side, side_runs in runs.items():
        if not side_runs:
            continue
        names = VLLM_PARTS if side == "vllm" else MODEL_PARTS
        summary = {part: spread([r.ms_per_step((part,)) for r in side_runs]) for part in names}
        summary["step"] = spread([r.ms_per_step(names) for r in side_runs])
        if side == "vllm":
            summary["own"] = spread([r.ms_per_step(VLLM_OWN) for r in side_runs])
            out["harness_over_own"] = round(summary["harness"]["median"] / summary["own"]["median"], 2)
        summary["steps"] = len(side_runs[0].grants)
        if side != "vllm":
            summary["violations"] = side_runs[0].violations
        out["sides"][side] = summary
    sides_run = out["sides"]
    if "model" in sides_run and "vllm" in sides_run:
        model, vllm = sides_run["model"], sides_run["vllm"]
        out["ratio_over_vllm_own"] = round(vllm["own"]["median"] / model["step"]["median"], 2)
        out["ratio_over_vllm_step"] = round(vllm["step"]["median"] / model["step"]["median"], 2)
        out["agreement"] = agreement(runs["model"][0].grants, runs["vllm"][0].grants)
    if "columnar" in sides_run and "vllm" in sides_run:
        out["columnar_ratio_over_vllm_own"] = round(sides_run["vllm"]["own"]["median"]
                                                    / sides_run["columnar"]["step"]["median"], 2)
    if "columnar" in sides_run:
        out["columnar_agreement"] = columnar_agreement(ops)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--side", choices=("all", "both", "model", "columnar", "vllm"), default="all",
                        help="all: the scalar model, the columnar model and vLLM; both: the scalar model and vLLM")
    parser.add_argument("--requests", type=int, nargs="+", default=list(REQUESTS), help="workload sizes")
    parser.add_argument("--rounds", type=int, default=3, help="runs of each side per size (default 3)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--steps", type=int, default=100, help="most step ops per run (default 100)")
    parser.add_argument("--json", action="store_true", help="print one JSON document on stdout")
    args = parser.parse_args(argv)
    if args.rounds < 1 or args.steps < 1 or min(args.requests) < 1:
        parser.error("--rounds, --steps and every --requests must be at least 1")

    sides = {"all": ["model", "columnar", "vllm"], "both": ["model", "vllm"]}.get(args.side, [args.side])
    unavailable: dict[str, str] = {}
    sizes = [measure(n, args, sides, unavailable) for n in args.requests]
    if (len(sides) == 1 and unavailable) or not any(size["sides"] for size in sizes):
        print(f"bench_scheduler: {'; '.join(f'{s}: {why}' for s, why in unavailable.items())}", file=sys.stderr)
        return 2
    ratios = [size["ratio_over_vllm_own"] for size in sizes if "ratio_over_vllm_own" in size]
    goal, goal_sizes = COLUMNAR_GOAL
    columnar = {size["requests"]: size["columnar_ratio_over_vllm_own"] for size in sizes
                if "columnar_ratio_over_vllm_own" in size and size["requests"] in goal_sizes}
    equal = [size["columnar_agreement"] for size in sizes if "columnar_agreement" in size]
    bound, bound_sizes = HARNESS_GOAL
    harness = {size["requests"]: size["harness_over_own"] for size in sizes
               if "harness_over_own" in size and size["requests"] in bound_sizes}
    alike = [size["agreement"] for size in sizes if "agreement" in size]
    doc: dict[str, Any] = {
        "workload": {"config": CONFIG, "policy": POLICY, "prompt_len": PROMPT_LEN, "max_tokens": MAX_TOKENS,
                     "accept_p": ACCEPT_P, "seed": args.seed, "max_steps": args.steps, "rounds": args.rounds},
        "sizes": sizes,
        "unavailable": unavailable,
        "goal_met": min(ratios) >= GOAL_RATIO if ratios else None,  # None: one side only, nothing compared
        "columnar_goal_met": (min(columnar.values()) >= goal and len(columnar) == len(goal_sizes)) if columnar else None,
        "columnar_equal": all(a["equal_steps"] == a["compared_steps"] for a in equal) if equal else None,
        "harness_goal_met": (max(harness.values()) <= bound and len(harness) == len(bound_sizes)) if harness else None,
        "granting_alike": all(a["agreeing_steps"] == a["compared_steps"] for a in alike) if alike else None,
    }
    if args.json:
        print(json.dumps(doc, indent=2))
    else:
        _print_text(doc)
    return 0


def _print_text(doc: dict[str, Any]) -> None:
    w = doc["workload"]
    print(f"workload: B={w['config']['max_num_batched_tokens']} S={w['config']['max_num_seqs']} "
          f"{w['config']['method']} k={w['config']['num_speculative_tokens']} parallel, p_accept={w['accept_p']}, "
          f"seed {w['seed']}, at most {w['max_steps']} steps, {w['rounds']} rounds; CPU ms/step, median (min)")
    for size in doc["sizes"]:
        for side, s in size["sides"].items():
            parts = (*VLLM_PARTS, "own") if side == "vllm" else MODEL_PARTS
            cells = "  ".join(f"{p} {s[p]['median']:.3f} ({s[p]['min']:.3f})" for p in (*parts, "step"))
            print(f"N={size['requests']:<5} {side:8} {s['steps']:4d} steps  {cells}")
        if "harness_over_own" in size:
            print(f"N={size['requests']:<5} harness: our own cost / vLLM's own schedule + update = "
                  f"{size['harness_over_own']}x")
        if "ratio_over_vllm_own" in size:
            a = size["agreement"]
            print(f"N={size['requests']:<5} ratio: vLLM's own schedule + update / model step = "
                  f"{size['ratio_over_vllm_own']}x; whole vLLM step (harness included) / model step = "
                  f"{size['ratio_over_vllm_step']}x; {a['agreeing_steps']}/{a['compared_steps']} steps grant alike")
        if "columnar_ratio_over_vllm_own" in size:
            print(f"N={size['requests']:<5} columnar: vLLM's own schedule + update / columnar step = "
                  f"{size['columnar_ratio_over_vllm_own']}x")
        if "columnar_agreement" in size:
            a = size["columnar_agreement"]
            print(f"N={size['requests']:<5} columnar: {a['equal_steps']}/{a['compared_steps']} steps with the scalar "
                  f"step's record, outcome and verdict, {a['columnar_steps']} of them columnar"
                  + (f" (first difference: step {a['first_difference']})" if a["first_difference"] is not None else ""))
    for side, why in doc["unavailable"].items():
        print(f"{side} unavailable: {why}")
    verdict = {True: "met", False: "not met", None: "not measured (one side ran)"}
    print(f"goal: the model >= {GOAL_RATIO:g}x vLLM's own schedule + update at every size: {verdict[doc['goal_met']]}")
    bound, bound_sizes = HARNESS_GOAL
    print(f"goal: the vLLM harness <= {bound:g}x vLLM's own schedule + update at "
          f"{' and '.join(map(str, bound_sizes))} requests: {verdict[doc['harness_goal_met']]}; every step granting "
          f"as the model's: {verdict[doc['granting_alike']]}")
    goal, goal_sizes = COLUMNAR_GOAL
    print(f"goal: the columnar step >= {goal:g}x vLLM's own at {' and '.join(map(str, goal_sizes))} requests: "
          f"{verdict[doc['columnar_goal_met']]}; every step equal to the scalar step's: "
          f"{verdict[doc['columnar_equal']]}")


if __name__ == "__main__":
    sys.exit(main())
