"""CrossHair contracts: the PEP 316 conditions that ``crosshair check`` verifies.

The budget functions carry their contracts in their own docstrings (``tokenbudget/model/policy.py``
and the policies); ``step.py`` states the reference scheduler's step. ``CHECKED`` lists what the
test suite hands to ``crosshair check``: every built-in policy (``model.registry.BUILTIN``) and the
step; ``examples/bugs_detected`` holds planted bugs the same contracts catch.
"""
from ...model.registry import BUILTIN

CHECKED = (
    *(f"{cls.__module__}.{cls.__qualname__}" for cls in BUILTIN),
    "tokenbudget.proofs.contracts.step",
)
PLANTED = "tokenbudget.proofs.contracts.examples.bugs_detected.planted"
