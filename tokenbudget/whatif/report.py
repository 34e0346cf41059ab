"""The terminal table of a whatif run (the JSON document is the summaries themselves)."""
from __future__ import annotations

from typing import Any, Sequence


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value * 1000:.1f}"


def change(new: float | None, old: float | None) -> float | None:
    """new against old, in percent (None where either is missing or old is 0)."""
    return None if new is None or not old else (new / old - 1) * 100


def latency_table(runs: Sequence[dict[str, Any]]) -> str:
    """One row per (concurrency, policy): latencies in ms, throughput, tokens per step, and
    the p50 TTFT change against the first policy of the same concurrency."""
    head = ("conc", "policy", "TTFT p50", "p90", "p99", "TPOT p50", "ITL p50", "p90", "p99", "tok/s", "tok/step",
            "TTFT vs first")
    rows = [head]
    first: dict[Any, float | None] = {}
    for run in runs:
        s, conc = run["summary"], run["concurrency"]
        ttft, tpot, itl = s["ttft_s"], s["tpot_s"], s["itl_s"]
        base = first.setdefault(conc, ttft["p50"])
        delta = change(ttft["p50"], base)
        rows.append((str(conc or "-"), s["policy"], _ms(ttft["p50"]), _ms(ttft["p90"]), _ms(ttft["p99"]),
                     _ms(tpot["p50"]), _ms(itl["p50"]), _ms(itl["p90"]), _ms(itl["p99"]),
                     "-" if s["throughput_tok_s"] is None else f"{s['throughput_tok_s']:.0f}",
                     f"{s['tokens_per_step']['mean']:.0f}", "-" if delta is None else f"{delta:+.1f}%"))
    return _columns(rows) + "\n(latencies in ms)"


def budget_table(budgets: dict[str, dict[str, Any]], running: Sequence[int]) -> str:
    """The effective budget of each policy at each running count, or why it has none."""
    rows = [("policy", *(f"R={r}" for r in running))]
    refused = []
    for name, entry in budgets.items():
        if entry.get("refused"):
            refused.append(f"{name}: refused the config: {entry['refused']}")
        else:
            rows.append((name, *(str(entry["budget"][str(r)]) for r in running)))
    return "\n".join([_columns(rows)] + refused)


def _columns(rows: Sequence[Sequence[str]]) -> str:
    widths = [max(len(r[i]) for r in rows if i < len(r)) for i in range(len(rows[0]))]
    return "\n".join("  ".join(cell.ljust(w) for cell, w in zip(r, widths)).rstrip() for r in rows)


def validation_table(rows: Sequence[dict[str, Any]], policies: Sequence[str]) -> str:
    """Measured against predicted median TTFT per concurrency and policy, and the change
    between the two policies, measured and predicted."""
    table = [("conc", "policy", "measured TTFT p50", "predicted", "error")]
    for r in rows:
        for name in policies:
            m = r[name]
            table.append((str(r["concurrency"]), name, _ms(m["measured_ttft_p50_s"]), _ms(m["predicted_ttft_p50_s"]),
                          f"{m['error_pct']:+.1f}%"))
        table.append((str(r["concurrency"]), f"change {policies[0]} -> {policies[1]}", f"{r['measured_change_pct']:+.1f}%",
                      f"{r['predicted_change_pct']:+.1f}%",
                      f"{r['predicted_change_pct'] - r['measured_change_pct']:+.1f} points"))
    return _columns(table) + "\n(TTFT in ms)"


def trace_table(runs: Sequence[dict[str, Any]]) -> str:
    """One row per request of a trace: its TTFT under each policy (ms), and each run's end."""
    ran = [run for run in runs if "refused" not in run]
    ids = list(dict.fromkeys(rid for run in ran for rid in run["requests"]))
    table = [("request", *(run["policy"] for run in ran))]
    for rid in ids:
        table.append((rid, *(_ms(run["requests"].get(rid, {}).get("ttft_s")) for run in ran)))
    ends = [f"{run['policy']}: refused the trace's config: {run['refused']}" if "refused" in run else
            f"{run['policy']}: {run['seconds'] * 1000:.1f} ms" + (f", stopped at {run['error']}" if run["error"] else "")
            for run in runs]
    return _columns(table) + "\n(TTFT in ms; '-': no first token)\n" + "\n".join(ends)
