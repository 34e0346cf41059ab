"""CrossHair checks the PEP 316 contracts of the budget functions and of the reference
scheduler's step, and catches the planted bugs kept apart in
``tokenbudget/proofs/contracts/examples/bugs_detected``."""
from __future__ import annotations

import subprocess
import sys

import pytest

from tokenbudget.proofs.contracts import CHECKED, PLANTED

pytestmark = pytest.mark.proofs


def crosshair(*targets: str, iterations: int) -> subprocess.CompletedProcess[str]:
    """``crosshair check`` exploring each condition until ``iterations`` tries in a row find no
    new path: a count, not a time, so a busy machine explores as far as an idle one. (A
    0.5 s per-condition timeout explored so little that it missed a config the policy
    refuses, a FastDeploy config with parallel drafting, and the loop asking a policy's
    grant with its budgets spent; 10 iterations find each.)"""
    return subprocess.run([sys.executable, "-m", "crosshair", "check", "--analysis_kind=PEP316",
                           f"--max_uninteresting_iterations={iterations}", *targets],
                          capture_output=True, text=True, timeout=600)


def test_the_contracts_hold() -> None:
    proc = crosshair(*CHECKED, iterations=10)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_the_planted_bugs_are_caught() -> None:
    proc = crosshair(f"{PLANTED}.RefundWithoutDraftSlots.refund", f"{PLANTED}.GrantWithoutDraftSlots.grant",
                     iterations=100)  # 20 find both
    assert proc.returncode == 1, proc.stdout + proc.stderr
    errors = [line for line in proc.stdout.splitlines() if ": error: " in line]
    assert len(errors) == 2, proc.stdout
    assert any("refund(RefundWithoutDraftSlots()" in e and "self.charge" in e for e in errors)
    assert any("grant(GrantWithoutDraftSlots()" in e and "p.draft_slots <= b.input" in e for e in errors)
