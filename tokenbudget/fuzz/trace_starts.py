"""Runs that start from given traces: a counterexample (the prover's, a corpus's) replayed
whole, or up to a drawn op, before the machine's rules go on from the state it left."""
from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Sequence

from hypothesis import strategies as st

from ..model import BudgetConfig, BudgetPolicy, ConfigError, PolicyError
from ..model.config_edges import validates
from ..spec.trace import AddOp, Op, Trace, format_trace


@dataclass(frozen=True)
class TraceStart:
    """The config and the first ops of a run, taken from a trace."""

    config: BudgetConfig
    ops: tuple[Op, ...]


def usable_starts(policy: BudgetPolicy, traces: Sequence[Trace]) -> list[Trace]:
    """The traces a run of ``policy`` can start from: with ops, on a config it accepts (a
    user policy failing on one leaves it out: its own draws show that failure)."""
    usable = []
    for trace in traces:
        try:
            ok = bool(trace.ops) and validates(policy, BudgetConfig.from_dict(trace.config))
        except (ConfigError, PolicyError):
            ok = False
        if ok:
            usable.append(trace)
    return usable


def trace_starts(traces: Sequence[Trace]) -> st.SearchStrategy[TraceStart]:
    """Starts from ``traces`` (not empty): Hypothesis's simplest draw replays the first one
    whole; others leave out up to all but the first op of one, from its end."""
    assert traces, "a start needs a trace"
    whole = [TraceStart(BudgetConfig.from_dict(t.config), tuple(t.ops)) for t in traces]
    return st.sampled_from(whole).flatmap(
        lambda start: st.integers(0, len(start.ops) - 1).map(
            lambda cut: TraceStart(start.config, start.ops[:len(start.ops) - cut])))


def next_index(ops: Sequence[Op]) -> int:
    """The first request index whose id (``str(index)``, as the machine names requests) no add of ``ops`` took."""
    taken = [int(op.id) for op in ops if isinstance(op, AddOp) and op.id.isdigit()]
    return max(taken, default=-1) + 1


def starts_name(traces: Sequence[Trace]) -> str:
    """What tells one set of starts from another in a machine's database key."""
    digest = hashlib.sha256("\n".join(format_trace(t) for t in traces).encode()).hexdigest()
    return f"starts {digest[:16]}"
