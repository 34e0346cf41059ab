"""The executable reference scheduler (one loop per engine family) and the budget policies of real engines.

A user policy imports what it needs from here: the policy interface, the config, the
engine loops (a policy names the one it runs on), and the IntLike helpers its arithmetic
must use so that the prover can run it on z3 terms.
"""
from .config import BudgetConfig, ConfigError, Requirement
from .methods import ALL_METHODS, TABLES
from .policy import BudgetParams, BudgetPolicy, Budgets
from .policy_guard import POLICY_ERROR, PolicyError
from .registry import builtin_policies, get_policy
from .fastdeploy.loop import FastDeployLoop
from .loop import SchedulerLoop, scheduler_for
from .one_pass_loop import OnePassLoop
from .vllm.loop import VllmLoop
from .trtllm.loop import TrtllmLoop
from .sglang.loop import SglangLoop
from ..spec.intlike import BoolLike, IntLike, and_, cdiv, ite, max_, min_, not_, or_

__all__ = [
    "BudgetConfig", "ConfigError", "Requirement", "ALL_METHODS", "TABLES", "BudgetParams", "BudgetPolicy", "Budgets",
    "POLICY_ERROR", "PolicyError", "builtin_policies", "get_policy", "SchedulerLoop", "OnePassLoop", "scheduler_for",
    "VllmLoop", "FastDeployLoop", "TrtllmLoop", "SglangLoop",
    "BoolLike", "IntLike", "and_", "cdiv", "ite", "max_", "min_", "not_", "or_",
]
