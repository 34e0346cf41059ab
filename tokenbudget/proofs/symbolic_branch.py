"""A policy (or loop variant) that branches on a symbolic value, named where it does.

The prover runs a policy's methods and the loops' decisions on z3 terms. Python's
``if``, ``and``, ``or``, ``not``, ``bool()``, ``min()`` and ``max()`` ask a z3 term for a
truth value, which z3 refuses with a Z3Exception. ``symbolic_branch`` turns that exception
(raised bare, or wrapped by the policy guard) into a ``SymbolicBranchError``: one line
naming the method, the user's file:line and the IntLike helper that does the same on z3
terms. It is a PolicyError, so every command gives it as bad input (exit 2).
"""
from __future__ import annotations

import linecache
import os
import re
import traceback
from typing import Optional

import z3

from ..model import POLICY_ERROR, PolicyError
from ..model.policy_guard import HELPER_NAMES

# What the failing line does with a z3 term -> the IntLike helper doing it on z3 terms;
# the first match wins (``if a and b`` fails in ``and``).
HELPER_FOR: tuple[tuple[str, str, str], ...] = (
    (r"\bmin\(", "min()", "min_"), (r"\bmax\(", "max()", "max_"), (r"\band\b", "and", "and_"),
    (r"\bor\b", "or", "or_"), (r"\bnot\b", "not", "not_"), (r"\bbool\(", "bool()", "ite"),
    (r"\b(if|elif|while|assert)\b", "if", "ite"),
)
_OURS = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep  # the tokenbudget package
_Z3 = os.path.dirname(os.path.abspath(z3.__file__)) + os.sep


class SymbolicBranchError(PolicyError):
    """Python control flow on a z3 term in a user's policy or loop variant; ``str()`` is one line."""

    def __init__(self, message: str, symbolic: bool = True) -> None:
        super().__init__(message, symbolic)


def symbolic_branch(exc: BaseException) -> Optional[SymbolicBranchError]:
    """The SymbolicBranchError for ``exc`` (or the exception it wraps) when it is z3
    refusing a truth value inside the user's code; None for anything else."""
    seen: set[int] = set()
    cause: Optional[BaseException] = exc
    while cause is not None and id(cause) not in seen:
        seen.add(id(cause))
        if isinstance(cause, z3.Z3Exception):
            return _named(cause)
        cause = cause.__cause__ or cause.__context__
    return None


def _named(exc: z3.Z3Exception) -> Optional[SymbolicBranchError]:
    frames = [f for f, _ in traceback.walk_tb(exc.__traceback__) if _users(f.f_code.co_filename)]
    if not frames:
        return None  # raised in our own code: a prover bug, not the user's
    frame = frames[-1]
    file, line = frame.f_code.co_filename, frame.f_lineno
    method = getattr(frame.f_code, "co_qualname", frame.f_code.co_name)
    source = linecache.getline(file, line).split("#")[0]
    construct, helper = next(((c, h) for pattern, c, h in HELPER_FOR if re.search(pattern, source)), ("if", "ite"))
    return SymbolicBranchError(
        f"{POLICY_ERROR}: {method} ({file}:{line}) branches on a z3 term with Python `{construct}` "
        f"(Z3Exception: the prover runs it on z3 terms); use {helper}(...) from tokenbudget.model "
        f"(the IntLike helpers: {HELPER_NAMES})")


def _users(filename: str) -> bool:
    path = os.path.abspath(filename)
    return not (path.startswith(_OURS) or path.startswith(_Z3) or "site-packages" in path
                or filename.startswith("<"))

