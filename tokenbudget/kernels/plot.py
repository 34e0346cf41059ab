"""The picture of a runner replay: rows per step, stacked by request, against the B line.

Each bar is one step; its segments are the runner rows of the requests it scheduled, in
layout order, one colour per request. The dashed line is B. A step the runner could not
execute is outlined in red and labelled with the fault. On CUDA a second panel shows the
peak memory of each step (and the cap, when the allocator was capped): flat for a policy
that keeps within B, climbing for one that does not.
"""
from __future__ import annotations

from typing import BinaryIO

from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

from .report import MIB, RunnerReport

MAX_LEGEND = 12  # requests named in the legend; more are only coloured


def plot_rows(report: RunnerReport, out: BinaryIO, title: str) -> None:
    """Draw the report as a PNG into ``out`` (a file opened for writing in binary mode)."""
    memory = [s.peak_bytes for s in report.steps]
    cuda = any(m is not None for m in memory)
    fig = Figure(figsize=(10, 6.5 if cuda else 4.5), layout="constrained")
    axes = fig.subplots(2 if cuda else 1, 1, sharex=True, squeeze=False)[:, 0]
    ax = axes[0]
    order = list(dict.fromkeys(rid for s in report.steps for rid in s.rows))
    colours = {rid: f"C{i % 10}" for i, rid in enumerate(order)}
    base = {s.step: 0 for s in report.steps}
    for rid in order:
        steps = [s for s in report.steps if rid in s.rows]
        heights = [s.rows[rid] for s in steps]
        ax.bar([s.step for s in steps], heights, bottom=[base[s.step] for s in steps], width=0.85,
               color=colours[rid], edgecolor="white", linewidth=0.3,
               label=rid if len(order) <= MAX_LEGEND else None)
        for s, h in zip(steps, heights):
            base[s.step] += h
    capacity = report.steps[0].capacity if report.steps else 0
    ax.axhline(capacity, color="black", linestyle="--", linewidth=1.2, label=f"B = {capacity}")
    for s in report.steps:
        if s.fault is not None:
            ax.bar([s.step], [s.total_rows], width=0.85, fill=False, edgecolor="red", linewidth=2)
            ax.annotate(s.fault.split(":")[0], (s.step, s.total_rows), xytext=(0, 4), textcoords="offset points",
                        ha="center", color="red", fontsize=8)
    ax.set_ylabel("runner rows")
    ax.set_title(title)
    ax.legend(loc="upper left", fontsize=7, ncol=2)
    if cuda:
        mem = axes[1]
        mem.plot([s.step for s in report.steps], [(m or 0) / MIB for m in memory], marker=".", label="peak allocated")
        if report.memory_cap:
            mem.axhline(report.memory_cap.cap_bytes / MIB, color="red", linestyle="--", label="allocator cap")
        mem.set_ylabel("MiB")
        mem.legend(loc="upper left", fontsize=7)
    axes[-1].set_xlabel("step")
    axes[-1].xaxis.set_major_locator(MaxNLocator(integer=True))
    fig.savefig(out, format="png", dpi=110)
