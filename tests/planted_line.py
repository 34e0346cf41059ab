"""A one-line slip planted into a copy of an engine's source, found by its text (never a line number)."""
from __future__ import annotations

from pathlib import Path


def replace_line(path: Path, old: str, new: str, occurrence: int = 1) -> None:
    """Rewrite ``path`` with its ``occurrence``-th line whose stripped text is ``old`` replaced by
    ``new``, the indentation kept; ValueError when it has fewer such lines."""
    lines = path.read_text().split("\n")
    hits = [i for i, line in enumerate(lines) if line.strip() == old]
    if len(hits) < occurrence:
        raise ValueError(f"{path} has {len(hits)} lines {old!r}, not {occurrence}")
    i = hits[occurrence - 1]
    lines[i] = lines[i][:len(lines[i]) - len(lines[i].lstrip())] + new
    path.write_text("\n".join(lines))
