"""whatif's plots (matplotlib): TTFT CDF per policy, tokens scheduled per step over time,
median TTFT against concurrency. One PNG each, one panel per concurrency where it applies."""
from __future__ import annotations

from pathlib import Path
from typing import Sequence

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402  (after the backend is chosen)
import numpy as np  # noqa: E402

from ..spec.user_paths import writable_folder  # noqa: E402
from . import metrics  # noqa: E402
from .simulator import RunResult  # noqa: E402

Runs = Sequence[tuple[int, RunResult]]  # (concurrency, run)


def write_all(runs: Runs, folder: Path) -> list[Path]:
    """Write the three plots into ``folder`` (created when missing); their paths."""
    out = writable_folder(folder, "--plot")
    concurrencies = sorted({c for c, _ in runs})
    return [_ttft_cdf(runs, concurrencies, out / "ttft_cdf.png"), _budget_use(runs, concurrencies, out / "budget_use.png"),
            _ttft_vs_concurrency(runs, out / "ttft_vs_concurrency.png")]


def _panels(count: int, title: str):
    fig, axes = plt.subplots(1, count, figsize=(4.5 * count, 3.6), squeeze=False)
    fig.suptitle(title)
    return fig, axes[0]


def _save(fig, path: Path) -> Path:
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def _ttft_cdf(runs: Runs, concurrencies: list[int], path: Path) -> Path:
    fig, axes = _panels(len(concurrencies), "TTFT CDF per policy")
    for ax, conc in zip(axes, concurrencies):
        for c, run in runs:
            if c == conc:
                values = np.sort(metrics.ttfts(run)) * 1000
                ax.step(values, np.arange(1, len(values) + 1) / len(values), where="post", label=run.policy)
        ax.set(title=f"concurrency {conc}", xlabel="TTFT (ms)", ylabel="fraction of requests")
        ax.legend(fontsize=8)
    return _save(fig, path)


def _budget_use(runs: Runs, concurrencies: list[int], path: Path) -> Path:
    fig, axes = _panels(len(concurrencies), "tokens scheduled per step")
    for ax, conc in zip(axes, concurrencies):
        for c, run in runs:
            if c == conc:
                line = ax.plot(run.step_end_s, run.step_tokens, lw=0.8, label=run.policy)[0]
                ax.axhline(run.token_cap, color=line.get_color(), ls=":", lw=0.8)
        ax.set(title=f"concurrency {conc} (dotted: token cap)", xlabel="time (s)", ylabel="tokens")
        ax.legend(fontsize=8)
    return _save(fig, path)


def _ttft_vs_concurrency(runs: Runs, path: Path) -> Path:
    fig, axes = _panels(1, "median TTFT against concurrency")
    policies = list(dict.fromkeys(run.policy for _, run in runs))
    for policy in policies:
        points = sorted((c, float(np.median(metrics.ttfts(run))) * 1000) for c, run in runs if run.policy == policy)
        axes[0].plot([p[0] for p in points], [p[1] for p in points], marker="o", label=policy)
    axes[0].set(xscale="log", xlabel="concurrency", ylabel="TTFT p50 (ms)")
    axes[0].legend(fontsize=8)
    return _save(fig, path)
