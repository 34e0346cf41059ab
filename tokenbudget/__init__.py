"""tokenbudget: token-budget invariants of speculative-decoding schedulers, modelled, proved and fuzzed."""
from .model import BudgetConfig, BudgetPolicy, ConfigError, Scheduler, builtin_policies, get_policy
from .spec import INVARIANTS, StepRecord, Violation, check_run, check_step

__version__ = "0.1.0"
__all__ = [
    "BudgetConfig", "BudgetPolicy", "ConfigError", "Scheduler", "builtin_policies", "get_policy",
    "INVARIANTS", "StepRecord", "Violation", "check_run", "check_step",
]
