"""Reading and writing a cost-model file (JSON, its ``kind`` naming the model)."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Union

from .cost_fitted import FittedCost
from .cost_roofline import RooflineCost
from .cost_table import TableCost

AnyCost = Union[RooflineCost, FittedCost, TableCost]
KINDS = {"roofline": RooflineCost, "fitted": FittedCost, "table": TableCost}
SHIPPED = Path(__file__).with_name("costs")


class CostFileError(ValueError):
    """A cost-model file that cannot be used; the message names the file and the problem."""


def load(path: Path) -> AnyCost:
    """The cost model in ``path``, or a shipped one by its name (``costs/<name>.json``)."""
    if not path.exists() and (SHIPPED / f"{path.name}.json").exists():
        path = SHIPPED / f"{path.name}.json"
    try:
        doc = json.loads(path.read_text())
    except OSError as e:
        raise CostFileError(f"cannot read cost model {str(path)!r}: {e.strerror}; name a file or one of "
                            f"{', '.join(shipped())}") from None
    except ValueError as e:
        raise CostFileError(f"cost model {str(path)!r} is not JSON ({e}); fix the file") from None
    kind = doc.get("kind") if isinstance(doc, dict) else None
    if kind not in KINDS:
        raise CostFileError(f"cost model {str(path)!r}: kind must be one of {', '.join(KINDS)}, got {kind!r}")
    try:
        return KINDS[kind].from_dict(doc)
    except (KeyError, TypeError, ValueError) as e:
        raise CostFileError(f"cost model {str(path)!r} lacks or garbles {e}; fix the file") from None


def save(cost: AnyCost, path: Path) -> None:
    path.write_text(json.dumps(cost.to_dict(), indent=1) + "\n")


def shipped() -> list[str]:
    """The names of the cost models shipped with tokenbudget."""
    return sorted(p.stem for p in SHIPPED.glob("*.json"))


def describe(cost: AnyCost) -> dict[str, Any]:
    """What a report says of the cost model: its kind and source."""
    doc = cost.to_dict()
    return {"kind": doc["kind"], "source": doc.get("source")}
