"""Every violation a fuzz session sees is in its report and written to the corpus folder:
also a kind a run showed beside the one it raised, or only while Hypothesis shrank, which
Hypothesis never raises again (it reports one failure per run)."""
from __future__ import annotations

import sys
from pathlib import Path

from tokenbudget.fuzz.session import Tally, fuzz
from tokenbudget.spec.trace import load_trace
from tokenbudget.verdict import replayed

sys.path.insert(0, str(Path(__file__).parents[1] / "unit"))  # verdict_policies
THROTTLED = "verdict_policies:ThrottledPrefill"  # shows spec-shape (finding F1) beside its own work gap


def test_every_kind_seen_live_is_reported_and_written(tmp_path: Path) -> None:
    live: set[str] = set()

    def heard(tally: Tally) -> None:
        live.update(tally.violations)

    report = fuzz(THROTTLED, examples=50, seed=0, max_work_gap=0, corpus=tmp_path, tally=heard)
    reported = {c.key for c in report.counterexamples}  # identities: spec-shape@F1, progress@F3, ...
    assert live and live <= reported, (live, reported)
    assert len(reported) == len(report.counterexamples)  # one counterexample per identity
    # this seed shows a kind Hypothesis never raised: it comes with the trace as its run found it, no program
    unraised = [c for c in report.counterexamples if not c.program]
    assert unraised, [c.kind for c in report.counterexamples]
    for c in report.counterexamples:
        trace_path, program_path = map(Path, c.paths)
        assert trace_path.parent == tmp_path and program_path.is_file()
        shown = replayed(load_trace(trace_path), THROTTLED)
        assert shown is not None and (c.kind == "work-conserving" or c.kind in {v.invariant for v in shown.violations})
