"""User policies that fail in every way a policy can: the bad-input suite loads them with
``--policy bad_input_policies:NAME``. Each one's docstring says how it fails."""
from __future__ import annotations

from tokenbudget.model import BudgetPolicy, VllmLoop
from tokenbudget.model.vllm.policies import VllmAdaptive

NOT_A_CLASS = 42


class Bare(BudgetPolicy):
    """A base class with nothing set but its loop: token_cap raises NotImplementedError."""

    loop = VllmLoop


class NoLoop(BudgetPolicy):
    """No loop at all: refused as it loads."""


class InitRaises(VllmAdaptive):
    """__init__ raises."""

    def __init__(self) -> None:
        raise ValueError("no init")


class ValidateRaises(VllmAdaptive):
    """validate divides by zero on every config."""

    def validate(self, cfg):  # type: ignore[no-untyped-def]
        return 1 // 0


class TokenCapRaises(VllmAdaptive):
    """token_cap raises on every config."""

    def token_cap(self, p):  # type: ignore[no-untyped-def]
        raise RuntimeError("no cap")


class GrantRaises(VllmAdaptive):
    """grant raises KeyError at the first grant."""

    def grant(self, p, demand, b):  # type: ignore[no-untyped-def]
        raise KeyError("boom")


class GrantReturnsText(VllmAdaptive):
    """grant returns a string."""

    def grant(self, p, demand, b):  # type: ignore[no-untyped-def]
        return "all of it"


class ChargeReturnsNone(VllmAdaptive):
    """charge returns None."""

    def charge(self, p, grant, is_decode):  # type: ignore[no-untyped-def]
        return None


class BranchesInPython(VllmAdaptive):
    """grant branches with a Python ``if`` on its arguments: fine on ints, a Z3Exception on z3 terms."""

    def grant(self, p, demand, b):  # type: ignore[no-untyped-def]
        if demand < b.token:
            return demand
        return b.token
