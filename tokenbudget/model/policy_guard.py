"""The guard around a user policy: any failure inside its methods becomes one PolicyError."""
from __future__ import annotations

import functools
import inspect
import os
import traceback
from typing import Any, Callable

from ..spec.invariants import POLICY_ERROR  # the verdict every command gives a failing user policy
from .config import ConfigError
from . import user_code
from .frozen_inputs import FrozenInputError, frozen, thawed
from .one_pass_loop import ENGINE_FLAGS, HOOKS, OnePassLoop, ignored_overrides
from .policy import BudgetParams, BudgetPolicy, Budgets

INT, BOOL = "an int", "a bool"
# method -> what it returns on concrete arguments (None: not checked)
RETURNS: dict[str, Any] = {
    "validate": None, "shared_requirements": list, "requirements": list, "accepts": BOOL, "in_scope": BOOL,
    "params": BudgetParams,
    "lookahead": INT, "token_cap": INT, "initial_budgets": Budgets, "may_schedule": BOOL, "grant": INT,
    "charge": Budgets, "refund": Budgets, "runner_rows": INT, "spend": Budgets,
    "table_for": str, "engine_version": None,
    # SGLang's decode half, which the loop calls with itself and its requests (``sglang_policies``)
    "decode_target": INT, "decode_need": INT, "decode_fits": BOOL, "retraction_order": list, "min_pool_tokens": INT,
}
# method -> what the guard keeps of its result: read-only (the loop hands it back to the
# policy later), or the loop's own requests behind the views the policy was given
KEPT: dict[str, Callable[[Any], Any]] = {
    "params": frozen, "initial_budgets": frozen, "charge": frozen, "refund": frozen, "spend": frozen,
    "retraction_order": thawed,
}
HELPER_NAMES = "ite, min_, max_, and_, or_, not_"  # the IntLike helpers a policy uses on z3 terms
HELPERS = f"{HELPER_NAMES} from tokenbudget.model"

# (flag values that cannot go together, why, the fix)
INCONSISTENT_FLAGS: tuple[tuple[dict[str, bool], str, str], ...] = (
    ({"pads_short_admissions": True, "drafts_in_grant": False},
     "a padded admission's k placeholder drafts ride inside its 1 + k grant, which the output update then "
     "cannot roll back", "set drafts_in_grant = True or pads_short_admissions = False"),
)


class PolicyError(Exception):
    """A user policy's method raised or returned the wrong type; ``str()`` is one line.
    ``symbolic`` is True when it was called on z3 terms (by the prover)."""

    def __init__(self, message: str, symbolic: bool = False) -> None:
        super().__init__(message)
        self.symbolic = symbolic

    def __reduce__(self) -> Any:  # crosses the prover's process pool intact
        return type(self), (str(self), self.symbolic)


def guard(policy: BudgetPolicy) -> BudgetPolicy:
    """The policy with every method of ``RETURNS`` guarded (on the instance, in place).
    ConfigError when its loop's flags are missing or inconsistent (``check_loop_flags``)."""
    cls = type(policy)
    check_loop_flags(cls.__name__, policy.loop)
    check_loop_hooks(cls.__name__, policy.loop)
    guard_loop_hooks(policy.loop)
    for name in RETURNS:
        method = getattr(policy, name, None)
        if callable(method):
            setattr(policy, name, _guarded(cls, name, method))
    return policy


def check_loop_flags(policy_name: str, loop: type) -> None:
    """ConfigError, one line, when a flag of ``loop`` is not a bool or the flags are inconsistent."""
    checked = loop_flags(loop)
    for flag in checked:
        value = getattr(loop, flag, None)
        if not isinstance(value, bool):
            raise ConfigError(f"{POLICY_ERROR}: {policy_name} runs on {loop.__name__}, whose {flag} is "
                              f"{_short(value)}, not a bool; set {flag} = True or False on the loop")
    for flags, why, fix in INCONSISTENT_FLAGS:
        if set(flags) <= set(checked) and all(getattr(loop, flag) == value for flag, value in flags.items()):
            both = " with ".join(f"{flag}={value}" for flag, value in flags.items())
            raise ConfigError(f"{POLICY_ERROR}: {policy_name} runs on {loop.__name__}, whose flags disagree: "
                              f"{both} ({why}); {fix}")


def loop_flags(loop: type) -> tuple[str, ...]:
    """The engine flags ``loop`` must set: a decode's grant counting its drafts (the shared
    output reads it), and for a ``OnePassLoop`` the facts its pass skeleton follows."""
    return ("drafts_in_grant",) + (ENGINE_FLAGS if issubclass(loop, OnePassLoop) else ())


def check_loop_hooks(policy_name: str, loop: type) -> None:
    """ConfigError, one line, when ``loop`` overrides a hook or sets a flag that the loop it
    derives from never calls or reads (``one_pass_loop.ignored_overrides``)."""
    for name, declarer in ignored_overrides(loop):
        hook = name in HOOKS
        what, uses = ("overrides", "calls") if hook else ("sets", "reads")
        honoured = ", ".join(sorted(getattr(declarer, "honours", ()))) or "none of them"
        others = ", ".join(c.__name__ for c in _engine_loops() if name in c.honours or name in ENGINE_FLAGS) or "none"
        raise ConfigError(f"{POLICY_ERROR}: {policy_name} runs on {loop.__name__}, which {what} {name}, but "
                          f"{declarer.__name__} never {uses} it (its step uses {honoured}); remove {name} from "
                          f"{loop.__name__}, or subclass a loop that {uses} it ({others})")


def guard_loop_hooks(loop: type) -> None:
    """Bracket the hooks a loop variant defines in the user's code (``user_code``): one that
    exits or runs past the time limit is a PolicyError naming the loop and the hook. Its
    exceptions are the model's ``model-error``, as before; our own loops are left alone."""
    for name in HOOKS:
        attr = inspect.getattr_static(loop, name, None)
        func = getattr(attr, "__func__", None)
        if not isinstance(attr, classmethod) or getattr(func, "guarded", False) or not _defined_by_user(func):
            continue
        setattr(loop, name, classmethod(_guarded_hook(loop, name, func)))


def _defined_by_user(func: Any) -> bool:
    try:
        file = inspect.getsourcefile(func)
    except TypeError:
        return False
    return bool(file) and _users(file)


def _guarded_hook(loop: type, name: str, func: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(func)
    def call(cls: type, *args: Any, **kwargs: Any) -> Any:
        outermost = user_code.enter()
        try:
            return func(cls, *args, **kwargs)
        except BaseException as e:
            if isinstance(e, Exception) or not user_code.escaped(e):
                raise
            raise _error(loop, name, func, e, _symbolic((*args, *kwargs.values()))) from None
        finally:
            user_code.leave(outermost)

    call.guarded = True  # type: ignore[attr-defined]
    return call


def _engine_loops() -> list[type[OnePassLoop]]:
    """The one-pass engine loops of this package (the direct subclasses of OnePassLoop in model/
    and its engine folders), the only loops whose step calls a hook or reads a flag."""
    package = OnePassLoop.__module__.rpartition(".")[0] + "."
    return [c for c in OnePassLoop.__subclasses__() if c.__module__.startswith(package)]


def _guarded(cls: type, name: str, method: Callable[..., Any]) -> Callable[..., Any]:
    keep = KEPT.get(name)

    @functools.wraps(method)
    def call(*args: Any, **kwargs: Any) -> Any:
        args = tuple(map(frozen, args))  # the policy reads its inputs, never writes them
        if kwargs:
            kwargs = {k: frozen(v) for k, v in kwargs.items()}
        outermost = user_code.enter()
        try:
            result = method(*args, **kwargs)
        except (PolicyError, ConfigError) as e:
            if isinstance(e, ConfigError) and name != "validate":
                raise _error(cls, name, method, e, _symbolic((*args, *kwargs.values()))) from None
            raise
        except Exception as e:
            raise _error(cls, name, method, e, _symbolic((*args, *kwargs.values()))) from None
        except BaseException as e:  # SystemExit, os._exit, a KeyboardInterrupt not the user's, a hang
            if not user_code.escaped(e):
                raise
            raise _error(cls, name, method, e, _symbolic((*args, *kwargs.values()))) from None
        finally:
            user_code.leave(outermost)
        problem = _wrong_type(name, result)
        if problem:
            raise PolicyError(f"{POLICY_ERROR}: {cls.__name__}.{name} ({_where(cls, method)}) {problem}",
                              _symbolic((*args, *kwargs.values())))
        return result if keep is None else keep(result)

    return call


def _error(cls: type, name: str, method: Callable[..., Any], e: BaseException, symbolic: bool) -> PolicyError:
    if isinstance(e, FrozenInputError):
        return PolicyError(f"{POLICY_ERROR}: {cls.__name__}.{name} ({_where(cls, method, e)}) writes {e.what}, "
                           f"read-only to a policy (state of its own belongs on self)", symbolic)
    head = f"{POLICY_ERROR}: {cls.__name__}.{name} ({_where(cls, method, e)})"
    if isinstance(e, user_code.CallTimedOut):
        return PolicyError(f"{head} {user_code.describe(e)}; make it return, or give --policy-timeout more seconds",
                           symbolic)
    if isinstance(e, (user_code.ExitCalled, SystemExit)):
        return PolicyError(f"{head} {user_code.describe(e)}, which would end the run as if it had passed; a policy "
                           f"returns or raises", symbolic)
    text = " ".join(str(e).split())
    text = text if len(text) <= 200 else text[:200] + "..."
    message = f"{head} raised {type(e).__name__}" + (f": {text}" if text else "")
    if symbolic:
        message += (f"; the prover calls it with z3 terms, so Python if/and/or/not/min/max on them fail: "
                    f"use {HELPERS}")
    return PolicyError(message, symbolic)


def symbolic_branch(e: BaseException) -> str:
    """One line for a z3 exception raised outside a guarded method (a loop variant, a
    helper of the policy's): the innermost function of the user's code in its traceback,
    its file:line, the exception and the IntLike helpers to use instead."""
    frames = traceback.extract_tb(e.__traceback__)
    users = [f for f in frames if _users(f.filename)] or frames[-1:]
    where = f"{users[-1].name} ({users[-1].filename}:{users[-1].lineno})" if users else "the policy"
    text = " ".join(str(e).split())
    return (f"{POLICY_ERROR}: {where} raised {type(e).__name__}: {text[:200]}; the prover calls it with z3 terms, "
            f"so Python if/and/or/not/min/max on them fail: use {HELPERS}")


def _where(cls: type, method: Callable[..., Any], e: BaseException | None = None) -> str:
    """file:line of the innermost frame of the user's code in the traceback, else of the
    method's definition, else (a method the policy inherits from tokenbudget) of the class."""
    frames = [f for f in traceback.extract_tb(e.__traceback__)] if e is not None else []
    frames = [f for f in frames if _users(f.filename)]
    if frames:
        return f"{frames[-1].filename}:{frames[-1].lineno}"
    for obj in (inspect.unwrap(getattr(method, "__func__", method)), cls):
        try:
            file, line = inspect.getsourcefile(obj), inspect.getsourcelines(obj)[1]
        except (TypeError, OSError):
            continue
        if file and _users(file):
            return f"{file}:{line}"
    return "?"


def _users(filename: str) -> bool:
    path = os.path.abspath(filename)
    return not (path.startswith(_OURS) or "site-packages" in path or filename.startswith("<"))


_OURS = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep  # the tokenbudget package


def _symbolic(values: Any, depth: int = 0) -> bool:
    """Whether a z3 term is among the values or their attributes (a symbolic config or params)."""
    for v in values:
        if _is_z3(v):
            return True
        if depth == 0 and isinstance(v, tuple) and _symbolic(v, 1):  # a read-only twin keeps its values in a tuple
            return True
        if depth == 0 and hasattr(v, "__dict__") and not isinstance(v, (type, BudgetPolicy)) \
                and _symbolic(vars(v).values(), 1):
            return True
    return False


def _is_z3(value: Any) -> bool:
    return type(value).__module__.startswith("z3")


def _wrong_type(name: str, result: Any) -> str | None:
    want = RETURNS[name]
    if want is None:
        return None
    if want == INT:  # a bool is an int to Python, but a grant of True is a slip, not 1 token
        ok = (isinstance(result, int) and not isinstance(result, bool)) or _is_z3(result)
    elif want == BOOL:
        ok = isinstance(result, int) or _is_z3(result)
    else:
        ok = isinstance(result, want)
    return None if ok else f"returned {type(result).__name__} {_short(result)}, expected {_name(want)}"


def _name(want: Any) -> str:
    return want if isinstance(want, str) else f"a {want.__name__}"


def _short(value: Any) -> str:
    text = " ".join(repr(value).split())
    return text if len(text) <= 60 else text[:57] + "..."
