"""The budget hooks keep their PEP 316 contracts: CrossHair checks only what a docstring states,
so a contract lost in an edit would pass silently."""
from __future__ import annotations

import pytest

from tokenbudget.model.policy import BudgetPolicy


@pytest.mark.parametrize("hook", ["grant", "charge", "refund"])
def test_each_budget_hook_states_its_contract(hook: str) -> None:
    doc = getattr(BudgetPolicy, hook).__doc__ or ""
    lines = [line.strip() for line in doc.splitlines()]
    assert any(line.startswith("pre:") for line in lines), f"{hook} lost its preconditions"
    assert any(line.startswith("post:") for line in lines), f"{hook} lost its postconditions"
