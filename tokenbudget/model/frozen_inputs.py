"""Read-only inputs for a user policy: what the model hands it, it may read and never change."""
from __future__ import annotations

import dataclasses
import inspect
from operator import attrgetter, itemgetter
from typing import Any, Callable

from .config import BudgetConfig
from .kv_pool import KVBlockPool
from .loop import SchedulerLoop
from .policy import BudgetParams, Budgets
from .request import Request


class FrozenInputError(AttributeError):
    """A policy wrote an input; ``what`` names it (``draft_slots of its BudgetParams``)."""

    def __init__(self, what: str) -> None:
        super().__init__(f"{what} is an input, read-only to a policy")
        self.what = what


def _refuse(kind: str) -> Callable[..., Any]:
    def refuse(self: Any, name: str, *value: Any) -> None:
        raise FrozenInputError(f"{name} of its {kind}")
    return refuse


def _field(index: int, name: str, kind: str) -> property:
    def write(self: Any, *value: Any) -> None:
        raise FrozenInputError(f"{name} of its {kind}")
    return property(itemgetter(index), write, write)


def _twin(base: type) -> type:
    """The read-only twin of the frozen dataclass ``base``: a subclass of it and of tuple."""
    names = tuple(f.name for f in dataclasses.fields(base))
    kind = base.__name__

    def new(cls: type, *values: Any, **named: Any) -> Any:
        return tuple.__new__(cls, values + tuple(named[n] for n in names[len(values):]))

    def equal(self: Any, other: Any) -> Any:
        if not isinstance(other, base):
            return NotImplemented
        return all(getattr(self, n) is getattr(other, n) or getattr(self, n) == getattr(other, n) for n in names)

    def fields_read_only(self: Any) -> FrozenDict:
        return FrozenDict(zip(names, self), kind=kind)

    def init(self: Any, *values: Any, **named: Any) -> None:
        pass  # the values are the tuple's, set by new

    # Made as the base is made: CrossHair, which may build a twin where the base is asked for,
    # reads the signatures of __new__ and __init__.
    new.__signature__ = init.__signature__ = inspect.signature(base.__init__, eval_str=True)  # type: ignore[attr-defined]
    namespace: dict[str, Any] = {name: _field(i, name, kind) for i, name in enumerate(names)}
    namespace.update(
        __slots__=(), __new__=new, __init__=init, __getnewargs__=lambda self: tuple(self),
        __getstate__=lambda self: None, __dict__=property(fields_read_only),
        __setattr__=_refuse(kind), __delattr__=_refuse(kind), __eq__=equal, __hash__=base.__hash__,
        __repr__=base.__repr__, __module__=__name__, __doc__=f"A read-only {kind} (``frozen_inputs``).",
    )
    if "replace" in vars(base):  # BudgetConfig.replace: a new config, checked as any config is
        namespace["replace"] = lambda self, **changes: frozen(base(**{**dict(zip(names, self)), **changes}))
    return type(f"Frozen{kind}", (base, tuple), namespace)


FrozenBudgetParams, FrozenBudgets, FrozenBudgetConfig = (_twin(base) for base in (BudgetParams, Budgets, BudgetConfig))
_TWINS = {BudgetParams: FrozenBudgetParams, Budgets: FrozenBudgets, BudgetConfig: FrozenBudgetConfig}
_TWIN_TYPES = frozenset(_TWINS.values())
_VALUES = {base: attrgetter(*(f.name for f in dataclasses.fields(base))) for base in _TWINS}  # each a tuple
_IMMUTABLE = frozenset({int, bool, float, str, type(None), frozenset}) | _TWIN_TYPES
_VIEWED = (SchedulerLoop, Request, KVBlockPool)


class FrozenList(list):  # type: ignore[type-arg]
    """A copy of a list handed to a policy: reads as a list, refuses every change."""

    def _refused(self, *args: Any, **kwargs: Any) -> None:
        raise FrozenInputError("a list it was given")

    append = extend = insert = pop = remove = clear = sort = reverse = _refused
    __setitem__ = __delitem__ = __iadd__ = __imul__ = _refused  # type: ignore[assignment]


class FrozenDict(dict):  # type: ignore[type-arg]
    """A copy of a dict handed to a policy (or of a twin's fields, its ``vars()``): refuses every change."""

    def __init__(self, *args: Any, kind: str = "", **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.kind = kind

    def __setitem__(self, key: Any, value: Any) -> None:
        raise FrozenInputError(f"{key} of its {self.kind}" if self.kind else "a dict it was given")

    def _refused(self, *args: Any, **kwargs: Any) -> None:
        raise FrozenInputError(f"the fields of its {self.kind}" if self.kind else "a dict it was given")

    __delitem__ = pop = popitem = clear = update = setdefault = __ior__ = _refused  # type: ignore[assignment]


class ReadOnlyView:
    """A loop, a request or a KV pool as a policy sees it: reads go through (frozen), writes raise."""

    __slots__ = ("_target",)

    def __init__(self, target: Any) -> None:
        object.__setattr__(self, "_target", target)

    def __getattr__(self, name: str) -> Any:
        value = getattr(object.__getattribute__(self, "_target"), name)
        if callable(value) and hasattr(value, "__self__"):  # a bound method of the loop, the pool, a request
            return _reading(value)
        return frozen(value)

    def __setattr__(self, name: str, value: Any) -> None:
        raise FrozenInputError(f"{name} of its {type(object.__getattribute__(self, '_target')).__name__}")

    def __delattr__(self, name: str) -> None:
        raise FrozenInputError(f"{name} of its {type(object.__getattribute__(self, '_target')).__name__}")

    def __eq__(self, other: object) -> bool:
        return thawed(self) is thawed(other)

    def __hash__(self) -> int:
        return id(thawed(self))

    def __repr__(self) -> str:
        return f"read-only {object.__getattribute__(self, '_target')!r}"


def _reading(method: Callable[..., Any]) -> Callable[..., Any]:
    def call(*args: Any, **kwargs: Any) -> Any:
        return frozen(method(*map(thawed, args), **{k: thawed(v) for k, v in kwargs.items()}))
    return call


_last: dict[type, tuple[Any, Any]] = {}  # base type -> (the last value frozen, its twin): the loop hands the same params


def frozen(value: Any) -> Any:
    """``value`` as a policy may see it: read-only, equal to it."""
    kind = type(value)
    if kind in _IMMUTABLE:
        return value
    twin = _TWINS.get(kind)
    if twin is not None:
        last = _last.get(kind)
        if last is not None and last[0] is value:
            return last[1]
        made = tuple.__new__(twin, _VALUES[kind](value))
        _last[kind] = (value, made)
        return made
    if kind is list or kind is tuple:
        out = [frozen(v) for v in value]
        return FrozenList(out) if kind is list else tuple(out)
    if kind is dict:
        return FrozenDict({k: frozen(v) for k, v in value.items()})
    if kind is set:
        return frozenset(value)
    if isinstance(value, _VIEWED):
        return ReadOnlyView(value)
    return value


def thawed(value: Any) -> Any:
    """The object behind a view (a list of views: a new list of them), else ``value``."""
    if type(value) is ReadOnlyView:
        return object.__getattribute__(value, "_target")
    if type(value) is FrozenList or (type(value) is list and value and type(value[0]) is ReadOnlyView):
        return [thawed(v) for v in value]
    return value
