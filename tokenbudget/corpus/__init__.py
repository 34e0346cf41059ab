"""The counterexample corpus shipped with tokenbudget: trace files, each with expectations."""
from __future__ import annotations

from pathlib import Path

from ..spec.trace import Trace, load_trace


def corpus_paths() -> list[Path]:
    """The shipped trace files, sorted by name."""
    return sorted(Path(__file__).parent.glob("*.json"))


def load_corpus() -> list[Trace]:
    """Every shipped trace, loaded and validated."""
    return [load_trace(path) for path in corpus_paths()]
