"""``tokenbudget conform``: the model against a real engine, step by step (``fuzz.conform``).

Exit status 0 when every workload agrees or each divergence is explained in SPEC.md,
1 when some divergence is unexplained; vLLM missing is bad input (the CLI's 2).
"""
from __future__ import annotations

import argparse
from typing import Any, Callable

from .harness.conform import ConformReport, run_conformance
from .harness.features import FEATURES
from .render import counts, table
from .exits import FAILED, OK


def conform_command(args: argparse.Namespace, progress: Callable[[str], None],
                    print_json: Callable[[Any], None]) -> int:
    """Run ``conform`` for parsed ``args`` (engine, workloads, seed, corpus, json)."""
    report = run_conformance(args.seed, args.workloads, args.corpus, progress)
    if args.json:
        print_json(report.to_json())
    else:
        print(render_report(report))
    return OK if report.ok else FAILED


def render_report(report: ConformReport) -> str:
    """The plain-text summary: agreement, coverage, every divergence with its trace and explanation."""
    lines = [
        f"conform  model (vllm-adaptive) vs {report.engine} 0.32, seed {report.seed}, "
        f"{report.workloads} workloads in {report.seconds:.1f} s",
        f"agreement: {report.agreeing}/{report.workloads} workloads ({100 * report.agreement:.1f}%), "
        f"{report.steps_agreeing} steps agreeing",
    ]
    features = [f for f in FEATURES if f in report.coverage]
    methods = sorted(f for f in report.coverage if f.startswith("method:"))
    lines.append("coverage (workloads exercising each feature):")
    lines += ["  " + line for line in table(["feature", "workloads"],
                                            [[f, str(report.coverage[f])] for f in features + methods], right=(1,))]
    if report.divergences:
        lines.append(f"divergences: {len(report.divergences)} ({len(report.unexplained)} unexplained), "
                     f"traces in {report.corpus}")
    for d in report.divergences:
        r = d.result
        assert r.model is not None and r.vllm is not None
        if r.vllm.error is not None:
            what = f"vLLM raised {r.vllm.error}; model grants {counts(r.model.num_scheduled_tokens)}, " \
                   f"violations {', '.join(r.model.violations) or 'none'}"
        else:
            what = "; ".join(f"{f} model {_brief(getattr(r.model, f))} vs vLLM {_brief(getattr(r.vllm, f))}"
                             for f in r.fields)
        why = f"{d.explanation.id} ({d.explanation.spec})" if d.explanation else "UNEXPLAINED"
        lines.append(f"  workload {d.workload} step {r.step}: {what}")
        lines.append(f"    {why}; trace {d.trace}")
    lines.append(f"verdict: {'ok' if report.ok else 'FAIL'}")
    return "\n".join(lines)


def _brief(value: object) -> str:
    """A compared field in a few characters: ``a:3 b:4`` for counts, ``a,b`` for ids."""
    if isinstance(value, dict):
        return counts(value)
    ids = sorted(value) if isinstance(value, frozenset) else list(value) if isinstance(value, tuple) else []
    return ",".join(map(str, ids)) or "-"
