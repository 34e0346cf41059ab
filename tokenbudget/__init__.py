"""tokenbudget: token-budget invariants of speculative-decoding schedulers, modelled, proved and fuzzed."""
from .model import BudgetConfig, BudgetPolicy, ConfigError, builtin_policies, get_policy, scheduler_for
from .model.replay import BadInput, ReplayResult, replay_on_model
from .spec import INVARIANTS, StepRecord, Trace, TraceError, Violation, check_run, check_step, load_trace

__version__ = "0.1.0"
__all__ = [
    "BudgetConfig", "BudgetPolicy", "ConfigError", "builtin_policies", "get_policy", "scheduler_for",
    "INVARIANTS", "StepRecord", "Violation", "check_run", "check_step",
    "Trace", "TraceError", "load_trace", "BadInput", "ReplayResult", "replay_on_model",
]
