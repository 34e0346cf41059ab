"""Benchmark: the least a model step can cost while its rules are IntLike calls and every step is judged.

Run after ``pip install -e .``::

    python bench/bench_rule_floor.py [--requests 8 64 256 512] [--rounds 5] [--steps 100] [--seed N]
                                     [--fuzz-examples 50] [--json]

On ``bench_scheduler.py``'s standard workload (the same ops), the model runs once per size
and its records are kept. Then, in CPU time (``process_time``), min and median over
``--rounds``:

- ``rules``: for every grant of the run, the calls the loop makes to the rules written over
  IntLike, with that grant's own values: the exit rule (``may_schedule``),
  ``decisions.running_grant``, ``decisions.scheduled_drafts``, ``grant_rules.kv_slots_needed``,
  the policy's ``charge``, ``spend`` and ``runner_rows``, then the output's
  ``decisions.accepted_drafts`` and ``decisions.computed_after_output``. An admission makes
  more calls than this (``decisions.admission``), and nothing else of a step is counted
  (no queue, no KV pool, no record), so this is a floor;
- ``checks``: ``check_step`` of every record (the spec's step invariants);
- ``vllm own``: vLLM's own ``schedule`` + ``update_from_output`` per step (as
  ``bench_scheduler.py`` times it), when vLLM imports.

Each round times the three in turn, so a change of the machine's load meets them alike.

The target is the model step at a tenth of vLLM's own (median): the report says how far
the floor (rules + checks, min) stands above it.

Fuzzing (``--fuzz-examples`` per built-in policy, seed 0, as ``bench_fuzz.py`` runs its
throughput; 0 skips it): CPU µs per step in all, of it ``check_step``, and the grants per
step; the floor is the checks plus those grants at the standard workload's rules per grant
(the largest size's, min), against FUZZ_TARGET_STEPS_PER_S. Exit status 0; 2 when the
model cannot run or an option is out of range (one line on stderr).
"""
from __future__ import annotations

import argparse
import importlib
import json
import statistics
import sys
import time
from typing import Any, Callable, Mapping

from bench_scheduler import (CONFIG, GOAL_RATIO, MODEL_PARTS, POLICY, SideRun, Unavailable, _replay, generate_ops,
                             run_vllm, spread)

REQUESTS = (8, 64, 256, 512)
FUZZ_TARGET_STEPS_PER_S = 25_000  # ten times the ~2,500 steps/s fuzzing ran at when the 10x target was set


def model_records(ops: list[dict[str, Any]]) -> tuple[Any, list[Any]]:
    """The reference scheduler after replaying ``ops`` as ``bench_scheduler`` does (until a step
    grants nothing), and the records of the steps that granted."""
    from tokenbudget.model import BudgetConfig, get_policy, scheduler_for

    sched = scheduler_for(BudgetConfig.from_dict(CONFIG), get_policy(POLICY))
    records = []

    def step(accepted: Mapping[str, int]) -> dict[str, int]:
        record = sched.schedule()
        sched.update_from_output(record, accepted=dict(accepted))
        if record.num_scheduled_tokens:
            records.append(record)
        return record.num_scheduled_tokens

    _replay(ops, lambda op: sched.add_request(op["id"], op["prompt_len"], op["max_tokens"]), step,
            SideRun(dict.fromkeys(MODEL_PARTS, 0.0)))
    return sched, records


def rule_calls(sched: Any, records: list[Any]) -> Callable[[], None]:
    """A function that makes, for every grant of ``records``, the rule calls the loop makes for it."""
    from tokenbudget.model import decisions
    from tokenbudget.model.policy import Budgets
    from tokenbudget.spec import grant_rules

    policy, params, lim = sched.policy, sched.params, sched.limits
    k, lookahead, max_model_len = lim.num_speculative_tokens, lim.lookahead, lim.max_model_len
    grants = []  # (budgets before, grant, computed before, num_tokens, drafts, is_decode, padded)
    for rec in records:
        before = {e.request_id: Budgets(e.token_before, e.input_before) for e in rec.ledger if e.kind == "grant"}
        for rid, grant in rec.num_scheduled_tokens.items():
            computed, num_tokens = rec.computed_before[rid], rec.num_tokens[rid]
            grants.append((before[rid], grant, computed, num_tokens, rec.scheduled_draft_tokens.get(rid, 0),
                           computed >= num_tokens - 1, rid in rec.padded))
    assert grants, "the workload granted nothing"

    def run() -> None:
        for budgets, grant, computed, num_tokens, drafts, is_decode, padded in grants:
            policy.may_schedule(params, budgets)
            decisions.running_grant(policy, params, budgets, num_tokens + drafts - computed, computed, 0,
                                    max_model_len, False)
            decisions.scheduled_drafts(True, drafts, computed, grant, num_tokens, is_decode)
            grant_rules.kv_slots_needed(computed, grant, lookahead, max_model_len)
            policy.spend(budgets, policy.charge(params, grant, is_decode), -1)
            policy.runner_rows(params, grant, is_decode)
            taken = decisions.accepted_drafts(padded, min(k, drafts), drafts)
            decisions.computed_after_output(True, computed + grant, computed, grant, num_tokens, taken)

    return run


def cpu_ms(call: Callable[[], None], per: int) -> float:
    """CPU ms of one ``call``, divided by ``per`` (steps)."""
    t0 = time.process_time()
    call()
    return 1000 * (time.process_time() - t0) / per


def measure(num_requests: int, args: argparse.Namespace) -> dict[str, Any]:
    from tokenbudget.spec import check_step

    ops = generate_ops(args.seed, num_requests, args.steps)
    sched, records = model_records(ops)
    steps = len(records)
    rules = rule_calls(sched, records)
    rounds: dict[str, list[float]] = {"rules": [], "checks": [], "vllm": []}
    unavailable = None
    for _ in range(args.rounds):  # each round times every part, so a change of load meets them alike
        rounds["rules"].append(cpu_ms(rules, steps))
        rounds["checks"].append(cpu_ms(lambda: [check_step(r) for r in records], steps))
        if unavailable is None:
            try:
                rounds["vllm"].append(run_vllm(ops).ms_per_step(("schedule", "update")))
            except (Unavailable, ImportError) as exc:
                unavailable = str(exc)
    grants = sum(len(r.num_scheduled_tokens) for r in records)
    out: dict[str, Any] = {
        "requests": num_requests, "steps": steps, "grants_per_step": round(grants / steps, 1),
        "rules_ms": spread(rounds["rules"], 4), "checks_ms": spread(rounds["checks"], 4),
        "rules_us_per_grant": round(1000 * min(rounds["rules"]) * steps / grants, 3),
    }
    floor = min(rounds["rules"]) + min(rounds["checks"])
    out["floor_ms"] = round(floor, 4)
    if unavailable is not None:
        out["vllm_unavailable"] = unavailable
        return out
    out["vllm_own_ms"] = spread(rounds["vllm"], 4)
    target = statistics.median(rounds["vllm"]) / GOAL_RATIO
    out["target_ms"] = round(target, 4)
    out["floor_over_target"] = round(floor / target, 2)
    return out


def fuzz_floor(examples: int, rules_us_per_grant: float) -> dict[str, Any]:
    """Fuzzing's CPU µs per step, its ``check_step`` share and grants per step, and the floor."""
    from bench_fuzz import throughput
    from tokenbudget.fuzz import machine
    from tokenbudget.model import builtin_policies

    spent = {"checks": 0.0, "grants": 0}
    judge = machine.check_step

    def timed_judge(rec: Any) -> Any:
        t0 = time.process_time()
        try:
            return judge(rec)
        finally:
            spent["checks"] += time.process_time() - t0
            spent["grants"] += len(rec.num_scheduled_tokens)

    machine.check_step = timed_judge  # the machine judges each step through its module's name
    try:
        t0 = time.process_time()
        steps = sum(throughput(policy, examples, seed=0)["steps"] for policy in builtin_policies())
        cpu = time.process_time() - t0
    finally:
        machine.check_step = judge
    grants_per_step = spent["grants"] / steps
    floor = 1e6 * spent["checks"] / steps + grants_per_step * rules_us_per_grant
    target = 1e6 / FUZZ_TARGET_STEPS_PER_S
    return {"examples_per_policy": examples, "steps": steps, "steps_per_cpu_second": round(steps / cpu),
            "us_per_step": round(1e6 * cpu / steps, 1), "checks_us_per_step": round(1e6 * spent["checks"] / steps, 1),
            "grants_per_step": round(grants_per_step, 2), "floor_us_per_step": round(floor, 1),
            "target_us_per_step": round(target, 1), "left_for_the_rest_us": round(target - floor, 1)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, nargs="+", default=list(REQUESTS))
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--fuzz-examples", type=int, default=50)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    if min(args.requests) < 1 or args.rounds < 1 or args.steps < 1 or args.fuzz_examples < 0:
        print("bench_rule_floor: --requests, --rounds and --steps must be >= 1, --fuzz-examples >= 0",
              file=sys.stderr)
        return 2
    try:
        importlib.import_module("tokenbudget.model")
    except ImportError as exc:
        print(f"bench_rule_floor: the reference model is not importable ({exc}); run pip install -e . first",
              file=sys.stderr)
        return 2
    sizes = [measure(n, args) for n in args.requests]
    largest = max(sizes, key=lambda s: s["requests"])
    fuzz = fuzz_floor(args.fuzz_examples, largest["rules_us_per_grant"]) if args.fuzz_examples else None
    if args.json:
        print(json.dumps({"config": CONFIG, "policy": POLICY, "rounds": args.rounds, "sizes": sizes, "fuzz": fuzz},
                         indent=2))
        return 0
    print(f"standard workload ({POLICY}), CPU ms/step, min (median) of {args.rounds} rounds")
    for s in sizes:
        line = (f"N={s['requests']:<5} {s['steps']:3d} steps {s['grants_per_step']:6.1f} grants/step  "
                f"rules {s['rules_ms']['min']:.4f} ({s['rules_ms']['median']:.4f})  "
                f"checks {s['checks_ms']['min']:.4f} ({s['checks_ms']['median']:.4f})  floor {s['floor_ms']:.4f}")
        if "target_ms" in s:
            line += (f"  vLLM own {s['vllm_own_ms']['min']:.4f} ({s['vllm_own_ms']['median']:.4f})"
                     f"  10x target {s['target_ms']:.4f}: floor {s['floor_over_target']}x the target")
        else:
            line += f"  (vLLM: {s['vllm_unavailable']})"
        print(line)
    if fuzz is not None:
        print(f"fuzzing, {fuzz['examples_per_policy']} examples of each built-in: {fuzz['steps']} steps, "
              f"{fuzz['steps_per_cpu_second']} steps/CPU-s ({fuzz['us_per_step']} us/step), check_step "
              f"{fuzz['checks_us_per_step']} us/step, {fuzz['grants_per_step']} grants/step; floor "
              f"{fuzz['floor_us_per_step']} us/step (checks + grants x {largest['rules_us_per_grant']} us of rules) "
              f"of the {fuzz['target_us_per_step']} us a step of {FUZZ_TARGET_STEPS_PER_S:,} steps/s allows: "
              f"{fuzz['left_for_the_rest_us']} us left for the model's queues, pool and records, the machine "
              "and Hypothesis")
    return 0


if __name__ == "__main__":
    sys.exit(main())
