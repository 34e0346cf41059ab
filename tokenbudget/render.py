"""Every plain-text output of the commands: tables, one function per report.

Each function takes what a command got from the library and returns the text it prints;
the JSON output is the library's own ``to_json``.
"""
from __future__ import annotations

import unicodedata
from collections import Counter
from itertools import islice
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping, Sequence

from .fuzz.coverage import PATHS
from .harness.features import FEATURES
from .model import POLICY_ERROR
from .spec import INVARIANTS

if TYPE_CHECKING:  # the reports, named for their types only: a command loads only what it renders
    from .check import CheckReport, PolicyRow
    from .fuzz.parallel import Live
    from .fuzz.session import FuzzReport
    from .harness.conform import ConformReport
    from .kernels.report import RunnerReport
    from .model.replay import ReplayResult
    from .verdict import Judgement, Verdict
    from .proofs.verdicts import Outcome

MAX_LISTED = 10  # violations listed per trace before "... and N more"
MAX_TEXT = 300  # characters of one piece of input text (a description, an id, a message) shown
_ESCAPED_CATEGORIES = frozenset({"Cc", "Cs", "Zl", "Zp"})  # controls, lone surrogates, line separators
_BIDI = frozenset("\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069")


def clean(text: object, limit: int = MAX_TEXT) -> str:
    """Text from the input (ids, descriptions, paths, messages quoting them) made safe to
    print on one line: control characters (newlines, ANSI escapes), lone surrogates, line
    separators and bidi overrides escaped as ``\\n``, ``\\x1b``, ``\\ud800``; past ``limit``
    characters cut with a note saying how many were left out, unless the note is no shorter
    than what it would replace."""
    text = str(text)
    cut = len(text) - limit if len(text) > limit else 0
    if cut and len(_cut_note(cut)) >= cut:
        cut = 0
    if cut:
        text = text[:limit]
    if not text.isprintable():
        text = "".join(_escape(c) for c in text)
    return text + _cut_note(cut) if cut else text


def _cut_note(cut: int) -> str:
    return f"... ({cut} more characters)"


def _escape(c: str) -> str:
    if c == " " or not (c in _BIDI or unicodedata.category(c) in _ESCAPED_CATEGORIES):
        return c
    return c.encode("unicode_escape", "backslashreplace").decode("ascii") if ord(c) < 0xD800 or ord(c) > 0xDFFF \
        else f"\\u{ord(c):04x}"


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
    listed = values.items() if len(values) <= limit else islice(values.items(), limit - 2)
    items = [f"{clean(rid, 40)}:{n}" for rid, n in listed]
    if len(values) > limit:
        items.append(f"+{len(values) - limit + 2} more")
    return " ".join(items)


# -- policies ---------------------------------------------------------------------------
def policies(rows: Sequence[Mapping[str, str]]) -> str:
    header = ["name", "engine", "version", "models", "description"]
    return "\n".join(table(header, [[r[h] for h in header] for r in rows]))


# -- replay -----------------------------------------------------------------------------
def replay(result: ReplayResult, description: str | None, judged: Sequence[Verdict] = ()) -> str:
    """A replay's steps, violations and verdict; ``judged``: a user policy's verdict on each
    violated invariant (``tokenbudget.verdict``), one line each before the verdict."""
    lines = [f"trace   {clean(result.source)}"]
    if description:
        lines.append(f"        {clean(description)}")
    lim = result.limits
    if lim is None:
        lines.append(f"policy  {clean(result.policy)}")
        lines.append(f"config refused: {clean(result.refusal)}")
    else:
        lines.append(f"policy  {clean(result.policy)}  B={lim.max_num_batched_tokens} T={lim.max_num_scheduled_tokens} "
                     f"S={lim.max_num_seqs} k={lim.num_speculative_tokens} d={lim.draft_slots} L={lim.lookahead}")
        if result.engine_version:
            lines.append(f"version {clean(result.engine_version)}")
        rows = [[str(s.step), counts(s.num_scheduled_tokens), counts(s.scheduled_draft_tokens),
                 f"{s.tokens}/{s.token_cap}", f"{s.rows}/{s.row_cap}", clean(",".join(s.preempted)) or "-",
                 ",".join(dict.fromkeys(v.invariant for v in s.violations)) or "-"]
                for s in result.steps]
        header = ["step", "grants", "drafts", "tokens/T", "rows/B", "preempted", "violations"]
        lines += ["  " + line for line in table(header, rows, right=(0, 3, 4))]
        lines.append(f"violations: {len(result.violations) or 'none'}")
        lines += [f"  {clean(v)}" for v in result.violations[:MAX_LISTED]]
        if len(result.violations) > MAX_LISTED:
            lines.append(f"  ... and {len(result.violations) - MAX_LISTED} more")
        lines += [f"target error in {clean(e)} (later ops not applied)" for e in result.errors]
    if result.expectations:
        lines.append("expectations:")
        lines += [f"  {'met  ' if r.met else 'UNMET'}  {clean(r.message)}" for r in result.expectations]
    if result.policy_error:
        lines.append(clean(result.policy_error))
    lines += [f"judged: {v.invariant}: {clean(_judged(v))}" for v in judged]
    if not result.ok:
        verdict = POLICY_ERROR if result.policy_error else "FAIL"
    elif result.violations:
        verdict = f"violated, as expected ({', '.join(sorted({v.invariant for v in result.violations}))})"
    else:
        verdict = "ok"
    lines.append(f"verdict: {verdict}  (largest work gap seen: {result.max_work_gap} tokens in a step)")
    return "\n".join(lines)


def runner(report: RunnerReport) -> str:
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
    lines += ["  " + line for line in table(header, rows, right=tuple(range(len(header) - 1)))]
    if report.acceptance is not None:
        verified = sum(s.verified for s in report.steps)
        note = "; the trace set the acceptance applied" if report.mode == "forced" else ""
        lines.append(f"acceptance: {report.acceptance:.2f} ({sum(s.matched for s in report.steps)}/{verified} drafts "
                     f"by the runner's {report.rule} rule{note})")
    scheduled, committed = report.throughput()
    lines.append(f"throughput: {scheduled:.0f} scheduled tokens/s, {committed:.0f} committed tokens/s")
    lines.append(f"runner verdict: {report.fault or 'ok'}")
    return "\n".join(lines)


# -- check ------------------------------------------------------------------------------
def check(report: CheckReport) -> str:
    shown = [inv for inv in INVARIANTS.values() if not inv.engine_only]  # not the engine-only ones: no model run breaks them
    ids = [inv.id for inv in shown]
    header = ["policy", *[str(n) for n in range(1, len(ids) + 1)], "traces", "fuzzed", "verdict"]
    rows = [[clean(row.policy, 60), *[row.shown(i) for i in ids], str(row.traces),
             "-" if row.fuzzed is None else f"{row.fuzzed['examples']}/{row.fuzzed['steps']}",
             _row_verdict(report, row)] for row in report.rows]
    lines = table(header, rows)
    lines.append("")
    lines += [f"  {n:>2}  {inv.id}  ({inv.kind})" for n, inv in enumerate(shown, 1)]
    lines.append("cells: ok held in every replay and fuzz run; proved: held and the prover proved it; VIOLATED X "
                 "violated, known as X: a finding's id (tokenbudget/spec/SPEC.md §6), base (the user policy's base "
                 "shows it on the same trace) or record (the built-in's recorded verdict), each listed under known: "
                 "below, the fuzzer's and the prover's; UNEXPECTED a verdict failed on it (under failures:); gap N "
                 "the most budget a step left unused (a user policy's no more than its base's, else UNEXPECTED); - "
                 "not tested; fuzzed: the examples/steps its fuzz runs rest on (under the floor: no evidence, the "
                 "row fails)")
    known = [f"{r.policy}: {k}" for r in report.rows for k in r.known]
    for label, entries in (("skipped", report.skipped), ("known", known),
                           ("failures", [f"{r.policy}: {f}" for r in report.rows for f in r.failures])):
        if entries:
            lines.append(f"{label}:")
            lines += [f"  {clean(e)}" for e in entries]
    if report.interrupted:
        lines.append(f"interrupted (Ctrl-C) in the {report.interrupted} section; the matrix shows the sections "
                     f"before it")
    if report.seconds:
        lines.append("sections: " + ", ".join(f"{name} {s:.1f} s" for name, s in report.seconds.items()))
    if report.stopped:
        lines.append(f"stopped in the {clean(report.stopped)}; the matrix shows the sections before it")
    failed = any(not row.ok for row in report.rows)
    unfinished = "interrupted" if report.interrupted else "stopped" if report.stopped else None
    lines.append(f"verdict: {'FAIL' if failed else unfinished or 'ok'}  ({len(report.replays)} replays)")
    return "\n".join(lines)


def _row_verdict(report: CheckReport, row: PolicyRow) -> str:
    """A row's verdict: FAIL, or ok only when every section ran; else how the check ended."""
    if not row.ok:
        return "FAIL"
    return "interrupted" if report.interrupted else "stopped" if report.stopped else "ok"


# -- prove ------------------------------------------------------------------------------
def prove(j: Judgement, written: Sequence[Path], interrupted: str | None = None) -> str:
    """The obligation x policy table (verdict, time), then each verdict with its measured and
    recorded seconds, the traces written and the problems; ``interrupted`` says what Ctrl-C
    left unproved."""
    from .proofs.solving import Z3_VERSION  # z3 itself: loaded with the prover, not by every command
    obligations = list(dict.fromkeys(o.obligation for o in j.outcomes))
    policies = list(dict.fromkeys(o.policy for o in j.outcomes))
    names = {policy: clean(policy, 60) for policy in policies}
    by = {(o.policy, o.obligation): o for o in j.outcomes}
    rows = []
    for name in obligations:
        cells = []
        for policy in policies:
            o = by.get((policy, name))
            cells.append("-" if o is None else f"{_short(o)} {o.seconds:.1f}s")
        rows.append([name, *cells])
    lines = table(["obligation", *(names[p] for p in policies)], rows)
    lines += ["", f"z3 {Z3_VERSION}; proved: for every accepted config and any number of requests; "
                  f"proved<=N: for every state of at most N requests; searched<=N: no run of a bounded "
                  f"family of up to N requests breaks it (a loop the pass skeleton does not model); refuted: with "
                  f"a replaying trace", ""]
    for o in j.outcomes:
        expected = j.expected.get((o.policy, o.obligation))
        recorded = "" if expected is None else f", recorded {expected.seconds:.2f}s"
        lines.append(f"{names[o.policy]} / {o.obligation}: {o.label} ({o.method}, {o.seconds:.2f}s{recorded}): "
                     f"{clean(o.detail, 1000)}")
    if written:
        lines += ["", f"{len(written)} counterexample trace(s) written:", *(f"  {p}" for p in written)]
    if interrupted:
        lines += ["", f"interrupted (Ctrl-C): {interrupted}; the table shows the policies that finished"]
    so_far = " so far" if interrupted else ""
    lines += ["", f"every verdict{so_far} is as expected" if j.ok else f"{len(j.problems)} unexpected{so_far}:"]
    lines += [f"  {clean(p, 1000)}" for p in j.problems]
    return "\n".join(lines)


def _short(o: Outcome) -> str:
    from .proofs.verdicts import MODEL_SEARCH, PROVED_UP_TO  # the prover's names: loaded by prove, not by fuzz

    if o.verdict != PROVED_UP_TO:
        return o.verdict
    return f"searched<={o.bound}" if o.method == MODEL_SEARCH else f"proved<={o.bound}"


def manifest_update(recorded: int, path: str, unknown: Sequence[Outcome]) -> str:
    """What ``prove --update-manifest`` did: recorded the verdicts, or refused for an unknown one."""
    if unknown:
        return (f"not recorded: {len(unknown)} unknown verdict(s), e.g. {unknown[0].policy} / "
                f"{unknown[0].obligation}: {unknown[0].detail}")
    return f"recorded {recorded} verdicts in {path}"


# -- fuzz -------------------------------------------------------------------------------
def fuzz(reports: Sequence[FuzzReport], verdicts: Mapping[str, Sequence[Verdict]], corpus: Path,
         interrupted: str | None = None, strict: bool = False,
         no_evidence: Mapping[str, str | None] | None = None) -> str:
    """One row per policy (examples, steps, fuzzing seconds and the start-up before them),
    then each counterexample with its verdict (``verdicts``: per policy, one per
    counterexample, in order; ``tokenbudget.verdict``) and its trace; ``interrupted`` the
    policy Ctrl-C stopped; ``no_evidence``: per policy, why its run is too short to be ok
    (``tokenbudget.evidence``). The verdict line says what fails by the one rule, and what
    an ok rests on."""
    short = {p: why for p, why in (no_evidence or {}).items() if why}
    rows = [[clean(r.policy, 60), str(r.examples), str(r.steps), f"{r.steps_per_second:.0f}", f"{r.seconds:.1f}",
             f"{r.startup_seconds:.1f}", ", ".join(c.key for c in r.counterexamples) or "-"] for r in reports]
    lines = table(["policy", "examples", "steps", "steps/s", "seconds", "start-up s", "violated"], rows,
                  right=(1, 2, 3, 4, 5))
    for r in reports:
        for c, v in zip(r.counterexamples, verdicts[r.policy]):
            shrunk = f"shrunk to {len(c.trace.ops)} ops" if c.program else f"{len(c.trace.ops)} ops, no Hypothesis program"
            lines.append(f"{clean(r.policy, 60)}: {c.key} ({clean(_judged(v))}), first seen after {c.first_seen:.1f} s, "
                         f"{shrunk}")
            lines.append(f"  {clean(c.message)}")
            lines += [f"  {clean(path)}" for path in c.paths]
    coverage = sum((r.coverage for r in reports), Counter())
    lines.append(f"rare paths (steps): {paths(coverage)}")
    judged = [v for r in reports for v in verdicts[r.policy]]
    failing = [v for v in judged if v.fails(strict)]
    if interrupted:
        lines.append(f"interrupted (Ctrl-C) while fuzzing {clean(interrupted, 60)}; the rows show what ran")
    lines += [f"{clean(policy, 60)}: no evidence: {why}" for policy, why in short.items()]
    examples, steps = sum(r.examples for r in reports), sum(r.steps for r in reports)
    evidence = f"{examples} example{'s' * (examples != 1)}, {steps} step{'s' * (steps != 1)}"
    if not failing and short:
        verdict = f"no evidence: {len(short)} of {len(reports)} polic{'ies' if len(reports) != 1 else 'y'} ran " \
                  f"under the floor ({evidence} in all)"
    elif not judged:
        verdict = f"ok: no violation in {evidence}"
    elif not failing:
        verdict = f"ok: {len(judged)} known violation{'s' * (len(judged) != 1)} in {evidence}"
    else:
        known = sum(v.known is not None for v in judged)
        verdict = f"FAIL: {len(judged)} violations, {len(judged) - known} own or over the base, {known} known" + \
            (" (--strict)" if strict and known else "")
    lines.append(f"verdict: {verdict}  (target {reports[0].target if reports else '-'}, corpus {clean(corpus)})")
    return "\n".join(lines)


def _judged(v: Verdict) -> str:
    """``known: why``, ``own`` or ``gap over its base``: the kind of a verdict, in a few words."""
    return f"known: {v.known}" if v.known is not None else "gap over its base" if v.gap is not None else "own"


def paths(coverage: Mapping[str, int]) -> str:
    """``same-step-refund 3  padded-admission 0 ...``: every rare path, taken or not."""
    return "  ".join(f"{name} {coverage.get(name, 0)}" for name in PATHS)


def live(counts: Live) -> str:
    """The one progress line of several workers: counts, speed, violations by invariant, rare paths."""
    seconds = max(counts.seconds, 1e-9)
    violated = " ".join(f"{kind}x{n}" for kind, n in counts.violations().items()) or "none"
    taken = " ".join(f"{name}:{counts.coverage.get(name, 0)}" for name in PATHS)
    return (f"{seconds:.0f}s {counts.workers} workers {counts.examples} ex {counts.steps / seconds:.0f} steps/s "
            f"| violated {violated} | {taken}")


def campaign(doc: Mapping[str, Any], interrupted: bool) -> str:
    """A campaign's report (``fuzz.campaign.report_json``): counts, rare paths, violations, files."""
    seconds = doc["seconds"]
    lines = [f"campaign  {seconds / 3600:.3f} of {doc['hours']:g} hours{'  (interrupted)' if interrupted else ''}, "
             f"{doc['workers']} workers, target {doc['target']}, {len(doc['policies'])} policies, "
             f"database {doc['database']}",
             f"{doc['examples']} examples, {doc['steps']} steps ({doc['steps_per_second']:.0f}/s)",
             f"rare paths (steps): {paths(doc['coverage'])}"]
    rows = [[v["policy"], v["kind"], f"{v['seconds']:.0f}", v["trace"]] for v in doc["violations"]]
    if rows:
        lines += table(["policy", "violated", "after s", "trace"], rows, right=(2,))
    evidence = f"{doc['examples']} examples, {doc['steps']} steps"
    verdict = f"{len(rows)} violations" if rows else f"no evidence: {doc['no_evidence']}" if doc.get("no_evidence") \
        else f"ok: no violation in {evidence}"
    lines.append(f"verdict: {verdict}  "
                 f"(report {Path(doc['plot']).with_suffix('.json')}, plot {doc['plot']}, corpus {doc['corpus']})")
    return "\n".join(lines)


# -- conform ----------------------------------------------------------------------------
def conform(report: ConformReport) -> str:
    """Agreement, coverage, every divergence with its trace and explanation."""
    lines = [
        f"conform  model ({report.policy}, {report.label} {report.model_version}) vs {report.engine} {report.release}, "
        f"seed {report.seed}, {report.workloads} workloads in {report.seconds:.1f} s",
        f"agreement: {report.agreeing + report.predicted_crashes}/{report.workloads} workloads "
        f"({100 * report.agreement:.1f}%): {report.agreeing} step for step, {report.predicted_crashes} up to a crash "
        f"the model foretold; {report.steps_agreeing} steps agreeing",
    ]
    features = [f for f in FEATURES if f in report.coverage]
    methods = sorted(f for f in report.coverage if f.startswith("method:"))
    lines.append("coverage (workloads exercising each path):")
    lines += ["  " + line for line in table(["feature", "workloads"],
                                            [[f, str(report.coverage[f])] for f in features + methods], right=(1,))]
    if report.predicted_crashes:
        foretold = Counter(d.explanation.id for d in report.divergences if d.predicted and d.explanation)
        lines.append(f"crashes the model foretold: {counts(dict(sorted(foretold.items())))}, traces in {report.corpus}")
    others = [d for d in report.divergences if not d.predicted]
    if others:
        lines.append(f"divergences: {len(others)} ({len(report.unexplained)} unexplained), traces in {report.corpus}")
    for d in others:
        r = d.result
        assert r.model is not None and r.engine is not None
        if r.engine.error is not None:
            what = f"{report.label} raised {r.engine.error}; model grants {counts(r.model.num_scheduled_tokens)}, " \
                   f"violations {', '.join(r.model.violations) or 'none'}"
        else:
            what = "; ".join(f"{f} model {_brief(getattr(r.model, f))} vs {report.label} {_brief(getattr(r.engine, f))}"
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
