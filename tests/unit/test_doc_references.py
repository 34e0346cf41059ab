"""Every dotted reference to our own code in a docstring or comment (``model.loop.scheduler_for``)
names something that exists: a module moved or renamed leaves no stale pointer behind."""
from __future__ import annotations

import importlib
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
FOLDERS = ("spec", "model", "proofs", "fuzz", "kernels", "harness")  # each is tokenbudget.<folder>
REFERENCE = re.compile(r"``((?:%s)(?:\.[A-Za-z_][A-Za-z0-9_]*)+)``" % "|".join(FOLDERS))


def _resolves(reference: str) -> bool:
    """Whether the longest importable module prefix of ``reference`` has the rest as
    attributes (a dataclass field counts: it is an annotation, not a class attribute)."""
    parts = reference.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            obj: object = importlib.import_module("tokenbudget." + ".".join(parts[:cut]))
        except ModuleNotFoundError:
            continue
        for name in parts[cut:]:
            if isinstance(obj, type) and any(name in getattr(c, "__annotations__", {}) for c in obj.__mro__):
                return True
            if not hasattr(obj, name):
                return False
            obj = getattr(obj, name)
        return True
    return False


def _references() -> list[tuple[str, str]]:
    out = []
    for path in sorted((ROOT / "tokenbudget").rglob("*.py")):
        out += [(str(path.relative_to(ROOT)), m.group(1)) for m in REFERENCE.finditer(path.read_text())]
    return out


def test_the_scan_sees_references():
    assert len(_references()) > 30
    assert not _resolves("fuzz.workloads")  # a module that moved to harness.conform_workloads
    assert _resolves("model.loop.scheduler_for") and _resolves("spec.records.StepRecord.ledger")


def test_every_dotted_reference_resolves():
    stale = [f"{path}: ``{ref}``" for path, ref in _references() if not _resolves(ref)]
    assert not stale, "stale references:\n" + "\n".join(stale)
