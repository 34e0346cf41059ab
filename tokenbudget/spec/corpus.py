"""The trace corpus shipped with tokenbudget (the ``corpus/`` data folder), each trace with
its expectations.

The data folder installs as ``tokenbudget/corpus`` beside this package (``tokenbudget/spec``),
so the same relative path finds it in a checkout and in an installed copy. Its top holds counterexamples and regression traces of the budget policies;
``findings/`` holds findings about an engine's scheduling loop itself (SPEC.md,
"Findings"), which no budget policy can change.
"""
from __future__ import annotations

from pathlib import Path

from .trace import Trace, load_trace

CORPUS_DIR = Path(__file__).resolve().parent.parent / "corpus"
FINDINGS_DIR = CORPUS_DIR / "findings"


def corpus_paths(findings: bool = True) -> list[Path]:
    """The shipped trace files sorted by name, then (with ``findings``) the findings."""
    paths = sorted(CORPUS_DIR.glob("*.json"))
    return paths + sorted(FINDINGS_DIR.glob("*.json")) if findings else paths


def load_corpus(findings: bool = True) -> list[Trace]:
    """Every shipped trace (see ``corpus_paths``), loaded and validated."""
    return [load_trace(path) for path in corpus_paths(findings)]
