"""The picture of a campaign: steps/s and the rare paths' counts over its hours.

Drawn with matplotlib's object API on the Agg canvas: no pyplot, no display, no global
backend to set.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from .coverage import PATHS


def plot(history: Sequence[dict[str, Any]], path: Path) -> None:
    """Write ``path`` (PNG): steps/s above, the steps that took each rare path below."""
    figure = Figure(figsize=(8, 6), layout="constrained")
    FigureCanvasAgg(figure)
    speed, paths = figure.subplots(2, 1, sharex=True)
    hours = [point["seconds"] / 3600 for point in history]
    speed.plot(hours, [point["steps_per_second"] for point in history], marker=".")
    speed.set_ylabel("steps/s")
    speed.set_title("tokenbudget campaign")
    for name in PATHS:
        paths.plot(hours, [point["coverage"].get(name, 0) for point in history], label=name)
    paths.set_ylabel("steps taking the path")
    paths.set_yscale("symlog")
    paths.set_xlabel("hours")
    paths.legend(fontsize="small")
    figure.savefig(path.with_name(path.name + ".part.png"))
    path.with_name(path.name + ".part.png").replace(path)
