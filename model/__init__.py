"""The executable reference scheduler and the budget policies of real engines."""
from .config import BudgetConfig, ConfigError
from .methods import ALL_METHODS, TABLES
from .policy import BudgetParams, BudgetPolicy, Budgets, builtin_policies, get_policy, register
from .scheduler import Scheduler

__all__ = [
    "BudgetConfig", "ConfigError", "ALL_METHODS", "TABLES", "BudgetParams", "BudgetPolicy", "Budgets",
    "builtin_policies", "get_policy", "register", "Scheduler",
]
