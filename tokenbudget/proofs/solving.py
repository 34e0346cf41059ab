"""Small helpers around z3: checks that never pass an ``unknown`` off as a result."""
from __future__ import annotations

from typing import Any, Iterable, Optional, Sequence

import z3

from ..spec import interrupts

Z3_VERSION: str = z3.get_version_string()
# z3's resource units a counterexample's minimisation may spend, about 5-10 s of one core on
# the prover's largest queries: counted by z3 itself, so where it stops is the same on every
# machine, unlike a clock
MINIMISE_EFFORT = 40_000_000


# Ctrl-C is ours, not z3's: z3 would take SIGINT while it solves and Python would never see
# it; the command line's watchdog (``spec.interrupts``) interrupts the solver instead.
z3.set_param("ctrl_c", False)
interrupts.on_interrupt(lambda: z3.main_ctx().interrupt())


class Unknown(Exception):
    """z3 answered unknown (a timeout, or a question outside its decidable fragments).

    An unknown is a failure of the prover, never a pass."""


def solver(timeout_s: float, *constraints: Any) -> z3.Solver:
    """A solver that first simplifies and eliminates the equalities (the policy's
    arithmetic is mostly definitions), then runs z3's default SMT core on the rest:
    an order of magnitude faster on these queries than the default strategy."""
    s = z3.Then("simplify", "propagate-values", "solve-eqs", "smt").solver()
    s.set("timeout", max(1, int(timeout_s * 1000)))
    s.add(*constraints)
    return s


def solve(s: z3.Solver | z3.Optimize) -> Any:
    """``s.check()``; KeyboardInterrupt when Ctrl-C came before or during it
    (``spec.interrupts``: it cancels the check, and z3's bindings may turn the interrupt
    into a ctypes error)."""
    interrupts.check()
    try:
        result = s.check()
    except Exception:
        interrupts.check()
        raise
    interrupts.check()
    return result


def check(s: z3.Solver | z3.Optimize, what: str) -> bool:
    """True for sat, False for unsat; Unknown (naming ``what``) otherwise; KeyboardInterrupt
    on Ctrl-C."""
    result = solve(s)
    if result == z3.unknown:
        raise Unknown(f"z3 answered unknown for {what}: {s.reason_unknown()}")
    return bool(result == z3.sat)


def minimise(constraints: Sequence[Any], objectives: Iterable[Any], timeout_s: float, what: str,
             start: Optional[z3.ModelRef] = None) -> z3.ModelRef:
    """A model of ``constraints`` minimising ``objectives`` lexicographically.

    Each objective in turn is brought down by bisection over "at most v" (``solver``'s
    fast strategy, one query at a time), its bounds tried smallest first (0, 1, 3, 7, ...
    above the last refused one: counterexamples' knobs are small, their first models' are
    not), then pinned. The caller has shown the
    constraints satisfiable (``start`` is a model, if it has one). A query z3 cannot
    answer in time ends the descent of that objective and keeps the best model so far,
    and once the descent has spent MINIMISE_EFFORT the best model so far is the result:
    always a model, a counterexample is never lost to the optimiser.
    """
    s = solver(timeout_s, *constraints)
    spent = _effort(s)
    if start is None:
        if not check(s, what):
            raise AssertionError(f"{what}: satisfiable constraints became unsatisfiable")
        start = s.model()
    best = start
    for term in objectives:
        if not z3.is_expr(term):  # a knob pinned to a Python value has nothing to minimise
            continue
        high = best.eval(term, model_completion=True).as_long()
        low = 0  # every objective is a knob, a count or a sum of them: none goes below 0
        gap = 0
        while low < high:
            left = MINIMISE_EFFORT - (_effort(s) - spent)
            if left <= 0:
                return best
            s.set("rlimit", left)
            mid = min(low + gap, low + (high - low) // 2)
            s.push()
            s.add(term <= mid)
            result = solve(s)
            if result == z3.sat:
                best = s.model()
                high = best.eval(term, model_completion=True).as_long()
            s.pop()
            if result == z3.unsat:
                low, gap = mid + 1, 2 * gap + 1
            elif result == z3.unknown:
                break
        s.add(term == best.eval(term, model_completion=True))
    return best


def _effort(s: z3.Solver) -> int:
    """The resource units z3 has counted so far (``rlimit count``)."""
    stats = s.statistics()
    return next((int(stats.get_key_value(k)) for k in stats.keys() if k == "rlimit count"), 0)


def value(model: z3.ModelRef, term: Any) -> Any:
    """A term's value in the model as a Python int or bool (plain values and None pass through)."""
    if term is None or isinstance(term, (bool, int)):
        return term
    v = model.eval(term, model_completion=True)
    return z3.is_true(v) if z3.is_bool(v) else v.as_long()
