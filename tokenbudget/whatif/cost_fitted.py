"""Cost model (b): step seconds = intercept + non-negative coefficients times the step's
features (``step_shape.FEATURES``), fitted by non-negative least squares on measured steps."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from .step_shape import FEATURES, StepShape

TERMS = ("per_step_s",) + tuple(f"per_{name}_s" for name in FEATURES)


@dataclass(frozen=True)
class FittedCost:
    """``coefficients`` by ``TERMS``; ``source`` says what was measured, where and how."""

    coefficients: dict[str, float]
    source: dict[str, Any]

    def step_seconds(self, shape: StepShape) -> float:
        c = self.coefficients
        return c["per_step_s"] + sum(c[f"per_{n}_s"] * x for n, x in zip(FEATURES, shape.features()))

    def to_dict(self) -> dict[str, Any]:
        return {"kind": "fitted", "source": self.source, "coefficients": self.coefficients}

    @classmethod
    def from_dict(cls, doc: dict[str, Any]) -> "FittedCost":
        coefficients = {t: float(doc["coefficients"][t]) for t in TERMS}
        return cls(coefficients, dict(doc.get("source", {})))


def fit(shapes: Sequence[StepShape], seconds: Sequence[float], source: dict[str, Any]) -> FittedCost:
    """NNLS over the steps, twice: plain, then each row divided by the first fit's prediction,
    so that a long prefill does not drown the short decodes while the fit still estimates
    the mean time of a shape (dividing by the noisy measured time would bias it low).
    ValueError with fewer steps than terms."""
    if len(shapes) < len(TERMS):
        raise ValueError(f"a fit of {len(TERMS)} terms needs at least {len(TERMS)} measured steps, got {len(shapes)}")
    x = np.array([(1.0, *s.features()) for s in shapes], dtype=float)
    y = np.asarray(seconds, dtype=float)
    scale = x.max(axis=0)
    scale[scale == 0] = 1.0
    first = _nnls(x / scale, y)
    weight = 1.0 / np.maximum((x / scale) @ first, y.mean() * 1e-3)
    solution = _nnls((x / scale) * weight[:, None], y * weight) / scale
    return FittedCost(dict(zip(TERMS, (float(v) for v in solution))), source)


def _nnls(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """argmin ||a x - b|| over x >= 0: scipy's solver where scipy is installed, else projected gradient."""
    try:
        from scipy.optimize import nnls
    except ImportError:
        return projected_nnls(a, b)
    return np.asarray(nnls(a, b)[0])


def projected_nnls(a: np.ndarray, b: np.ndarray, iterations: int = 20000) -> np.ndarray:
    """Projected gradient descent for NNLS, with the step of the largest eigenvalue of aᵀa."""
    gram, target = a.T @ a, a.T @ b
    step = 1.0 / max(float(np.linalg.eigvalsh(gram).max()), 1e-300)
    x = np.zeros(a.shape[1])
    for _ in range(iterations):
        x_next = np.maximum(0.0, x - step * (gram @ x - target))
        if np.allclose(x_next, x, rtol=0, atol=1e-15):
            return x_next
        x = x_next
    return x
