"""tokenbudget: token-budget invariants of speculative-decoding schedulers, modelled, proved and fuzzed.

The names below are imported on first use, so that importing a submodule alone (the pytest
plugin, loaded by every pytest run where tokenbudget is installed) costs only that submodule."""
from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.1.0"
_EXPORTS = {
    ".model": ("BudgetConfig", "BudgetPolicy", "ConfigError", "builtin_policies", "get_policy", "scheduler_for"),
    ".model.replay": ("BadInput", "ReplayResult", "replay_on_model"),
    ".spec": ("INVARIANTS", "StepRecord", "Trace", "TraceError", "Violation", "check_run", "check_step",
              "load_trace"),
}
_HOME = {name: module for module, names in _EXPORTS.items() for name in names}
__all__ = [
    "BudgetConfig", "BudgetPolicy", "ConfigError", "builtin_policies", "get_policy", "scheduler_for",
    "INVARIANTS", "StepRecord", "Violation", "check_run", "check_step",
    "Trace", "TraceError", "load_trace", "BadInput", "ReplayResult", "replay_on_model",
]


def __getattr__(name: str) -> Any:
    if name not in _HOME:
        raise AttributeError(f"module 'tokenbudget' has no attribute {name!r}")
    value = getattr(importlib.import_module(_HOME[name], __name__), name)
    globals()[name] = value
    return value
