"""Human-readable output of the CLI: plain-text tables, one function per command."""
from __future__ import annotations

from typing import Mapping, Sequence

from .check import CheckReport
from .model.replay import ReplayResult
from .spec import INVARIANTS

MAX_LISTED = 10  # violations listed per trace before "... and N more"


def table(header: Sequence[str], rows: Sequence[Sequence[str]], right: Sequence[int] = ()) -> list[str]:
    """Columns padded to their widest cell; columns in ``right`` are right-aligned."""
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]
    lines = []
    for r in [header, *rows]:
        cells = [str(c).rjust(w) if i in right else str(c).ljust(w) for i, (c, w) in enumerate(zip(r, widths))]
        lines.append("  ".join(cells).rstrip())
    return lines


def counts(values: Mapping[str, int], limit: int = 6) -> str:
    """``0:10 1:4``; past ``limit`` entries the first few and ``+N more``."""
    if not values:
        return "-"
    items = [f"{rid}:{n}" for rid, n in values.items()]
    if len(items) > limit:
        items = items[: limit - 2] + [f"+{len(items) - limit + 2} more"]
    return " ".join(items)


def policies(rows: Sequence[Mapping[str, str]]) -> str:
    header = ["name", "engine", "version", "description"]
    return "\n".join(table(header, [[r[h] for h in header] for r in rows]))


def replay(result: ReplayResult, description: str | None) -> str:
    lines = [f"trace   {result.source}"]
    if description:
        lines.append(f"        {description}")
    lim = result.limits
    if lim is None:
        lines.append(f"policy  {result.policy}")
        lines.append(f"config refused: {result.refusal}")
    else:
        lines.append(f"policy  {result.policy}  B={lim.max_num_batched_tokens} T={lim.max_num_scheduled_tokens} "
                     f"S={lim.max_num_seqs} k={lim.num_speculative_tokens} d={lim.draft_slots} L={lim.lookahead}")
        rows = [[str(s.step), counts(s.num_scheduled_tokens), counts(s.scheduled_draft_tokens),
                 f"{s.tokens}/{s.token_cap}", f"{s.rows}/{s.row_cap}", ",".join(s.preempted) or "-",
                 ",".join(dict.fromkeys(v.invariant for v in s.violations)) or "-"]
                for s in result.steps]
        header = ["step", "grants", "drafts", "tokens/T", "rows/B", "preempted", "violations"]
        lines += ["  " + line for line in table(header, rows, right=(0, 3, 4))]
        lines.append(f"violations: {len(result.violations) or 'none'}")
        lines += [f"  {v}" for v in result.violations[:MAX_LISTED]]
        if len(result.violations) > MAX_LISTED:
            lines.append(f"  ... and {len(result.violations) - MAX_LISTED} more")
        lines += [f"target error in {e} (later ops not applied)" for e in result.errors]
    if result.expectations:
        lines.append("expectations:")
        lines += [f"  {'met  ' if r.met else 'UNMET'}  {r.message}" for r in result.expectations]
    if not result.ok:
        verdict = "FAIL"
    elif result.violations:
        verdict = f"violated, as expected ({', '.join(sorted({v.invariant for v in result.violations}))})"
    else:
        verdict = "ok"
    lines.append(f"verdict: {verdict}  (max work gap {result.max_work_gap})")
    return "\n".join(lines)


def check(report: CheckReport) -> str:
    ids = list(INVARIANTS)
    header = ["policy", *[str(n) for n in range(1, len(ids) + 1)], "traces", "verdict"]
    rows = [[row.policy, *[row.cells[i] for i in ids], str(row.traces), "ok" if row.ok else "FAIL"]
            for row in report.rows]
    lines = table(header, rows)
    lines.append("")
    lines += [f"  {n:>2}  {inv.id}  ({inv.kind})" for n, inv in enumerate(INVARIANTS.values(), 1)]
    lines.append("cells: ok held in every replay and fuzz run; VIOLATED violated where expected (by a corpus trace, "
                 "or for fuzzing also the proofs' manifest or an engine finding); UNEXPECTED a verdict failed on it; "
                 "gap N budget left unused; - not tested")
    for label, entries in (("skipped", report.skipped), ("failures", [f"{r.policy}: {f}" for r in report.rows for f in r.failures])):
        if entries:
            lines.append(f"{label}:")
            lines += [f"  {e}" for e in entries]
    lines.append(f"verdict: {'ok' if report.ok else 'FAIL'}  ({len(report.replays)} replays)")
    return "\n".join(lines)
