"""Benchmark: steps/s of the reference scheduler against the real vLLM scheduler.

Run after ``pip install -e .``::

    python bench/bench_scheduler.py [--side both|model|vllm] [--seed N] [--steps N] [--json]

The standard workload (deterministic from ``--seed``): B=8192, S=256, ngram with k=4 and
parallel drafting (d=3), 256 requests added at the start with prompt lengths uniform in
[50, 400] and max_tokens uniform in [20, 200], then up to ``--steps`` step ops. It is
generated once as trace-format ops and replayed on each side. Acceptance: each step op
carries, for every request, the number of leading successes among k Bernoulli(0.6)
trials; a target clips it to the drafts it scheduled, which makes it exactly the number
of leading successes over the scheduled drafts, and the same on both sides whatever
either scheduled.

A side stops at the first step that schedules nothing: no request arrives later, so no
correct scheduler would schedule anything again. Steps/s counts the steps run, timed
from ``schedule()`` to the end of the output update (``check_step`` included on the
model side; the fake model runner included on the vLLM side); construction (imports
and building the scheduler) and adding the requests are timed apart.

Exit status: 0 when every requested side ran; 2 when ``--side model`` or ``--side
vllm`` cannot run, or neither side of ``both`` can (one line on stderr).
"""
from __future__ import annotations

import argparse
import json
import random
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
NUM_REQUESTS = 256
PROMPT_LEN = (50, 400)
MAX_TOKENS = (20, 200)
ACCEPT_P = 0.6
GOAL_RATIO = 10.0

Op = dict[str, Any]
Grants = dict[str, int]


def generate_ops(seed: int, steps: int) -> list[Op]:
    """The standard workload as trace ops: NUM_REQUESTS adds, then ``steps`` step ops."""
    rng = random.Random(seed)
    ops: list[Op] = [
        {"op": "add", "id": str(i), "prompt_len": rng.randint(*PROMPT_LEN), "max_tokens": rng.randint(*MAX_TOKENS)}
        for i in range(NUM_REQUESTS)
    ]
    k = CONFIG["num_speculative_tokens"]
    for _ in range(steps):
        accepted = {}
        for i in range(NUM_REQUESTS):
            trials = [rng.random() < ACCEPT_P for _ in range(k)]  # always k: no side shifts the stream
            n = trials.index(False) if False in trials else k  # leading successes
            if n:
                accepted[str(i)] = n
        ops.append({"op": "step", "accepted": accepted})
    return ops


@dataclass
class SideResult:
    """One side's run: timings, per-step grants and invariant violations (None: not checked)."""

    construction_s: float
    add_s: float
    violations: int | None
    step_s: float = 0.0
    grants: list[Grants] = field(default_factory=list)

    def summary(self) -> dict[str, Any]:
        steps = len(self.grants)
        tokens = sum(sum(g.values()) for g in self.grants)
        return {
            "construction_s": round(self.construction_s, 4),
            "add_s": round(self.add_s, 4),
            "steps": steps,
            "step_s": round(self.step_s, 4),
            "steps_per_s": round(steps / self.step_s, 1) if self.step_s else None,
            "tokens_per_step": round(tokens / steps, 1) if steps else None,
            "violations": self.violations,
        }


class Unavailable(Exception):
    """A side cannot run here; the message says why."""


def run_model(ops: list[Op]) -> SideResult:
    """Replay ``ops`` on the reference scheduler, checking every step's invariants."""
    t0 = time.perf_counter()
    try:
        from tokenbudget.model import BudgetConfig, get_policy, scheduler_for
        from tokenbudget.spec import check_step
    except ImportError as exc:
        raise Unavailable(f"the reference model is not importable: {exc}") from None
    sched = scheduler_for(BudgetConfig.from_dict(CONFIG), get_policy(POLICY))
    result = SideResult(construction_s=time.perf_counter() - t0, add_s=0.0, violations=None)
    violations = 0

    def add(op: Op) -> None:
        sched.add_request(op["id"], op["prompt_len"], op["max_tokens"])

    def step(accepted: Mapping[str, int]) -> Grants:
        nonlocal violations
        record = sched.schedule()
        violations += len(check_step(record))
        sched.update_from_output(record, accepted=dict(accepted))
        return record.num_scheduled_tokens

    _replay(ops, add, step, result)
    result.violations = violations
    return result


def run_vllm(ops: list[Op]) -> SideResult:
    """Replay ``ops`` on the real vLLM scheduler."""
    t0 = time.perf_counter()
    from tokenbudget.harness.vllm.engine import EngineUnavailable, VllmEngine
    from tokenbudget.model.config import BudgetConfig

    try:
        engine = VllmEngine(BudgetConfig.from_dict(CONFIG))
    except EngineUnavailable as exc:
        raise Unavailable(str(exc)) from None
    result = SideResult(construction_s=time.perf_counter() - t0, add_s=0.0, violations=None)

    def add(op: Op) -> None:
        engine.add(op["id"], op["prompt_len"], op["max_tokens"])

    def step(accepted: Mapping[str, int]) -> Grants:
        observed = engine.step(accepted)
        if observed.error:
            raise RuntimeError(f"vLLM failed at step {len(result.grants)}: {observed.error}")
        return observed.num_scheduled_tokens

    _replay(ops, add, step, result)
    return result


def _replay(
    ops: list[Op], add: Callable[[Op], None], step: Callable[[Mapping[str, int]], Grants], result: SideResult
) -> None:
    """Apply the add ops (timed into ``add_s``), then the step ops until one schedules nothing."""
    t0 = time.perf_counter()
    for op in ops:
        if op["op"] == "add":
            add(op)
    result.add_s = time.perf_counter() - t0
    for op in ops:
        if op["op"] != "step":
            continue
        t0 = time.perf_counter()
        grants = step(op["accepted"])
        elapsed = time.perf_counter() - t0
        if not grants:
            break
        result.step_s += elapsed
        result.grants.append(grants)


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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--side", choices=("both", "model", "vllm"), default="both")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--steps", type=int, default=300, help="most step ops to run (default 300)")
    parser.add_argument("--json", action="store_true", help="print one JSON document on stdout")
    args = parser.parse_args(argv)

    ops = generate_ops(args.seed, args.steps)
    runners = {"model": run_model, "vllm": run_vllm}
    sides = list(runners) if args.side == "both" else [args.side]
    results: dict[str, SideResult] = {}
    unavailable: dict[str, str] = {}
    for side in sides:
        try:
            results[side] = runners[side](ops)
        except Unavailable as exc:
            unavailable[side] = str(exc)
    if (args.side != "both" and unavailable) or not results:
        print(f"bench_scheduler: {'; '.join(f'{s}: {why}' for s, why in unavailable.items())}", file=sys.stderr)
        return 2

    doc: dict[str, Any] = {
        "workload": {
            "config": CONFIG, "policy": POLICY, "requests": NUM_REQUESTS, "prompt_len": PROMPT_LEN,
            "max_tokens": MAX_TOKENS, "accept_p": ACCEPT_P, "seed": args.seed, "max_steps": args.steps,
        },
        "sides": {side: r.summary() for side, r in results.items()},
        "unavailable": unavailable,
    }
    if len(results) == 2:
        model, vllm = results["model"].summary(), results["vllm"].summary()
        ratio = model["steps_per_s"] / vllm["steps_per_s"] if model["steps_per_s"] and vllm["steps_per_s"] else None
        doc["ratio_model_over_vllm"] = round(ratio, 2) if ratio is not None else None
        doc["goal_met"] = ratio is not None and ratio >= GOAL_RATIO
        doc["agreement"] = agreement(results["model"].grants, results["vllm"].grants)

    if args.json:
        print(json.dumps(doc, indent=2))
    else:
        _print_text(doc)
    return 0


def _print_text(doc: dict[str, Any]) -> None:
    w = doc["workload"]
    print(
        f"workload: B={w['config']['max_num_batched_tokens']} S={w['config']['max_num_seqs']} "
        f"{w['config']['method']} k={w['config']['num_speculative_tokens']} parallel, {w['requests']} requests, "
        f"p_accept={w['accept_p']}, seed {w['seed']}, at most {w['max_steps']} steps"
    )
    header = ("side", "construct_s", "add_s", "steps", "steps/s", "tokens/step", "violations")
    print(f"{header[0]:6} " + " ".join(f"{h:>{width}}" for h, width in zip(header[1:], (11, 7, 5, 9, 11, 10))))
    for side, s in doc["sides"].items():
        print(
            f"{side:6} {s['construction_s']:11.3f} {s['add_s']:7.3f} {s['steps']:5d} {s['steps_per_s'] or 0:9.1f} "
            f"{s['tokens_per_step'] or 0:11.1f} {'-' if s['violations'] is None else s['violations']:>10}"
        )
    for side, why in doc["unavailable"].items():
        print(f"{side:6} unavailable: {why}")
    if "agreement" in doc:
        a = doc["agreement"]
        ratio = doc["ratio_model_over_vllm"]
        print(f"ratio model/vLLM: {ratio}x (goal >= {GOAL_RATIO:g}x: {'met' if doc['goal_met'] else 'not met'})")
        print(
            f"agreement: {a['agreeing_steps']}/{a['compared_steps']} steps with identical num_scheduled_tokens"
            + (f", first disagreement at step {a['first_disagreement']}" if a["first_disagreement"] is not None else "")
        )


if __name__ == "__main__":
    sys.exit(main())
