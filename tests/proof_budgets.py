"""The z3 budget of the suite's proofs: generous per query, so that a busy machine does not
turn a verdict into ``unknown``. A test that needs another bound N asks ``generous(N)``."""
from __future__ import annotations

from dataclasses import replace

from tokenbudget.proofs.obligations import Options

Z3_TIMEOUT_S = 600.0  # per z3 query
GENEROUS = Options(timeout_s=Z3_TIMEOUT_S)


def generous(max_requests: int) -> Options:
    return replace(GENEROUS, max_requests=max_requests)
