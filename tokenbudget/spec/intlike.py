"""Arithmetic that runs on Python ints and on z3 terms alike.

The budget arithmetic of a scheduling pass is written once over ``IntLike``. The
reference scheduler runs it on ints; the prover runs the very same functions on z3
terms. Each helper takes the fast Python path when every argument is concrete and
builds a z3 term otherwise. z3 is imported lazily, so the model runs without it.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Union

if TYPE_CHECKING:  # pragma: no cover
    import z3

    IntLike = Union[int, z3.ArithRef]
    BoolLike = Union[bool, z3.BoolRef]
else:
    IntLike = Any
    BoolLike = Any

_z3: Any = None


def _z3mod() -> Any:
    global _z3
    if _z3 is None:
        import z3

        _z3 = z3
    return _z3


_CONCRETE = frozenset((int, bool))


def is_concrete(*values: Any) -> bool:
    """True when every value is a plain Python int or bool (no z3 term)."""
    return _CONCRETE.issuperset(map(type, values))


def ite(cond: BoolLike, then: Any, other: Any) -> Any:
    """``then if cond else other``; a z3 If when cond is symbolic."""
    if isinstance(cond, bool):
        return then if cond else other
    z3 = _z3mod()
    return z3.If(cond, then, other)


def min_(*values: IntLike) -> IntLike:
    """The least of the values."""
    if len(values) == 2:  # the model's commonest call, its concreteness test unrolled
        a, b = values
        if type(a) in _CONCRETE and type(b) in _CONCRETE:
            return b if b < a else a
    elif _CONCRETE.issuperset(map(type, values)):
        return min(values)
    result = values[0]
    for v in values[1:]:
        result = ite(v < result, v, result)
    return result


def max_(*values: IntLike) -> IntLike:
    """The greatest of the values."""
    if len(values) == 2:
        a, b = values
        if type(a) in _CONCRETE and type(b) in _CONCRETE:
            return b if b > a else a
    elif _CONCRETE.issuperset(map(type, values)):
        return max(values)
    result = values[0]
    for v in values[1:]:
        result = ite(v > result, v, result)
    return result


def and_(*conds: BoolLike) -> BoolLike:
    """Conjunction of the conditions; a z3 And when one is symbolic."""
    for cond in conds:
        if type(cond) not in _CONCRETE:
            return _z3mod().And(*conds)
    return all(conds)


def or_(*conds: BoolLike) -> BoolLike:
    """Disjunction of the conditions; a z3 Or when one is symbolic."""
    for cond in conds:
        if type(cond) not in _CONCRETE:
            return _z3mod().Or(*conds)
    return any(conds)


def not_(cond: BoolLike) -> BoolLike:
    """Negation."""
    if isinstance(cond, bool):
        return not cond
    return _z3mod().Not(cond)


def cdiv(a: IntLike, b: IntLike) -> IntLike:
    """Ceiling division of non-negative a by positive b."""
    if type(a) is int and type(b) is int:
        return -(-a // b)
    return (a + b - 1) / b
