"""The built-in policies, by name, and the loader of user policies (``pkg.module:Class``).

The table below is the one list of built-in policies; ``tokenbudget policies``, ``check``,
``prove`` and ``fuzz`` all read it through ``builtin_policies``.
"""
from __future__ import annotations

import importlib

from .config import ConfigError
from .fastdeploy.policies import (
    FastDeployDecodeCount, FastDeployMtpOnly, FastDeployReserve, FastDeployReserveCherrypick, FastDeploySpecMethod, FastDeployV0,
)
from .loop import SchedulerLoop
from .policy import BudgetPolicy
from . import user_code
from .policy_guard import guard
from .sglang.policies import Sglang, SglangV1PageBoundary, SglangV1Retract, SglangV1RetractFixed
from .trtllm.policies import Trtllm, TrtllmOneModelUnreserved
from .vllm.policies import VllmAdaptive, VllmStatic

BUILTIN: tuple[type[BudgetPolicy], ...] = (
    VllmAdaptive, VllmStatic,
    FastDeployV0, FastDeployReserve, FastDeployReserveCherrypick, FastDeployDecodeCount, FastDeploySpecMethod,
    FastDeployMtpOnly,
    Trtllm, TrtllmOneModelUnreserved,
    Sglang, SglangV1Retract, SglangV1RetractFixed, SglangV1PageBoundary,
)
assert len({cls.name for cls in BUILTIN}) == len(BUILTIN), "two built-in policies share a name"


def builtin_policies() -> dict[str, type[BudgetPolicy]]:
    """The built-in policies by name, vLLM first."""
    return {cls.name: cls for cls in BUILTIN}


def get_policy(spec: str) -> BudgetPolicy:
    """A policy instance by built-in name or ``pkg.module:ClassName``.

    Raises ConfigError with one line naming the problem and the fix, whatever went wrong
    while importing the module or instantiating the class. A user policy comes guarded
    (``policy_guard``): a failure inside its methods is a PolicyError.
    """
    registry = builtin_policies()
    if spec in registry:
        return registry[spec]()
    if ":" not in spec:
        raise ConfigError(f"unknown policy {spec!r}; known: {', '.join(registry)} (or pkg.module:Class)")
    module_name, _, attr = spec.partition(":")
    if not module_name or module_name.startswith(".") or not attr:
        raise ConfigError(f"policy {spec!r} is not of the form pkg.module:Class (an absolute module path, a colon, "
                          f"a class name); fix --policy")
    try:
        with user_code.running(max(user_code.limit(), user_code.IMPORT_LIMIT_S)):
            module = importlib.import_module(module_name)
    except ImportError as e:
        raise ConfigError(f"cannot import policy module {module_name!r} ({e}); check --policy or PYTHONPATH") from None
    except Exception as e:  # the user's module raised while importing: name the problem, not our traceback
        raise ConfigError(f"importing policy module {module_name!r} raised {type(e).__name__}: {e}; fix that "
                          f"module") from None
    except BaseException as e:  # it exited, hung or raised KeyboardInterrupt itself
        if not user_code.escaped(e):
            raise
        raise ConfigError(f"importing policy module {module_name!r} {user_code.describe(e)}; fix that module") from None
    cls = getattr(module, attr, None)
    if not (isinstance(cls, type) and issubclass(cls, BudgetPolicy)):
        raise ConfigError(f"{spec!r} is not a BudgetPolicy subclass; point --policy at one")
    loop = getattr(cls, "loop", None)
    if not (isinstance(loop, type) and issubclass(loop, SchedulerLoop)):
        raise ConfigError(f"{spec!r} names no scheduling loop; set its loop (e.g. tokenbudget.model.VllmLoop) "
                          f"or subclass a built-in policy")
    try:
        with user_code.running():
            policy = cls()
    except Exception as e:
        raise ConfigError(f"creating policy {spec!r} raised {type(e).__name__}: {e}; fix its __init__") from None
    except BaseException as e:
        if not user_code.escaped(e):
            raise
        raise ConfigError(f"creating policy {spec!r} {user_code.describe(e)}; fix its __init__") from None
    for attr in ("name", "description", "engine", "version"):  # a base class with nothing set still reports
        if not isinstance(getattr(policy, attr, None), str):
            setattr(policy, attr, spec if attr == "name" else "")
    policy.loaded_from = spec
    return guard(policy)


def policy_spec(policy: BudgetPolicy) -> str:
    """How a trace names the policy, so that ``get_policy`` loads it back: a built-in's name;
    a user policy's ``pkg.module:Class`` exactly as it was given to ``get_policy``; else (an
    instance built in code) its class's module and name."""
    cls = type(policy)
    if builtin_policies().get(policy.name) is cls:
        return policy.name
    given = vars(policy).get("loaded_from")
    return given if isinstance(given, str) else f"{cls.__module__}:{cls.__qualname__}"
