"""Cost model (c): a table of measured steps; a step's seconds is the inverse-distance
weighted mean of its nearest measured shapes, distances taken on log(1 + feature)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from .step_shape import FEATURES, StepShape

NEIGHBOURS = 4


@dataclass(frozen=True)
class TableCost:
    """``rows``: (features in ``FEATURES`` order, seconds); ``source``: where they were measured."""

    rows: tuple[tuple[tuple[int, ...], float], ...]
    source: dict[str, Any]

    def __post_init__(self) -> None:
        if not self.rows:
            raise ValueError("a table cost model needs at least one measured step")
        object.__setattr__(self, "_points", np.log1p(np.array([f for f, _ in self.rows], dtype=float)))
        object.__setattr__(self, "_seconds", np.array([s for _, s in self.rows], dtype=float))

    def step_seconds(self, shape: StepShape) -> float:
        distance = np.linalg.norm(self._points - np.log1p(np.array(shape.features(), dtype=float)), axis=1)
        nearest = np.argsort(distance)[:NEIGHBOURS]
        if distance[nearest[0]] == 0:
            return float(self._seconds[nearest[0]])
        weights = 1.0 / distance[nearest]
        return float((weights * self._seconds[nearest]).sum() / weights.sum())

    def to_dict(self) -> dict[str, Any]:
        return {"kind": "table", "source": self.source, "features": list(FEATURES),
                "rows": [{"features": list(f), "seconds": s} for f, s in self.rows]}

    @classmethod
    def from_dict(cls, doc: dict[str, Any]) -> "TableCost":
        return cls(tuple((tuple(int(v) for v in r["features"]), float(r["seconds"])) for r in doc["rows"]),
                   dict(doc.get("source", {})))
