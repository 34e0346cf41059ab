"""A run's latencies and throughput: TTFT, TPOT, inter-token latency, budget use."""
from __future__ import annotations

from typing import Any

import numpy as np

from .simulator import RunResult

PERCENTILES = (50, 90, 99)


def _percentiles(values: list[float] | np.ndarray) -> dict[str, float | None]:
    if len(values) == 0:
        return {f"p{q}": None for q in PERCENTILES} | {"mean": None}
    arr = np.asarray(values, dtype=float)
    return {f"p{q}": float(np.percentile(arr, q)) for q in PERCENTILES} | {"mean": float(arr.mean())}


def ttfts(run: RunResult) -> np.ndarray:
    """Each request's time to first token (from when its client sent it), in workload order."""
    return np.array([t.first_token_s - t.sent_s for t in run.requests.values() if t.first_token_s is not None])


def summarise(run: RunResult) -> dict[str, Any]:
    """Seconds throughout: TTFT, TPOT (per output token after the first), ITL (between
    emitted chunks) as p50/p90/p99/mean; output tokens per second over the run; tokens
    scheduled per step (p50, mean) against the token cap, and the step count."""
    reqs = list(run.requests.values())
    tpot = [(t.finish_s - t.first_token_s) / (t.output_len - 1) for t in reqs
            if t.finish_s is not None and t.first_token_s is not None and t.output_len > 1]
    itl = [g for t in reqs for g in t.gaps]
    start = min((t.sent_s for t in reqs), default=0.0)
    end = float(run.step_end_s[-1]) if len(run.step_end_s) else start
    duration = end - start
    output_tokens = sum(t.output_len for t in reqs if t.finish_s is not None)
    return {
        "policy": run.policy,
        "requests": len(reqs),
        "ttft_s": _percentiles(ttfts(run)),
        "tpot_s": _percentiles(tpot),
        "itl_s": _percentiles(itl),
        "throughput_tok_s": output_tokens / duration if duration > 0 else None,
        "duration_s": duration,
        "steps": int(len(run.step_end_s)),
        "tokens_per_step": {"p50": float(np.median(run.step_tokens)) if len(run.step_tokens) else 0.0,
                            "mean": float(run.step_tokens.mean()) if len(run.step_tokens) else 0.0},
        "token_cap": run.token_cap,
    }
