"""Longer runs from a seed: a trace followed by more steps, with requests arriving.

``extend(trace, steps, seed)`` appends ``steps`` step ops to the trace. Before each, with
probability 1/2, one request arrives: a prompt of 1..min(max_model_len // 2, 256)
tokens, max_tokens 1..min(32, what max_model_len leaves), and every other arrival shares
a two-block system prompt (prefix group ``<prefix>sys``), so the prefix cache hits.
The arrivals depend only on the seed and the config, never on what the run does, so the
extended trace is an ordinary trace: it replays the same way in both modes.
"""
from __future__ import annotations

import random
from dataclasses import replace

from ..model import BudgetConfig
from ..spec.trace import AddOp, StepOp, Trace

ARRIVAL_PROBABILITY = 0.5
MAX_PROMPT = 256
MAX_OUTPUT = 32
MAX_STEPS = 100_000  # the ops are built before the run: more would cost memory and hours of runner time


def extend(trace: Trace, steps: int, seed: int) -> Trace:
    """The trace with ``steps`` more step ops and seeded arrivals; ConfigError for a bad
    config, ValueError for more than MAX_STEPS steps."""
    if steps > MAX_STEPS:
        raise ValueError(f"--steps {steps} is more than the runner target runs ({MAX_STEPS}); lower --steps")
    cfg = BudgetConfig.from_dict(trace.config)
    taken = {op.id for op in trace.ops if isinstance(op, AddOp)}
    prefix = "gen-"
    while any(rid.startswith(prefix) for rid in taken):
        prefix = "_" + prefix
    rng = random.Random(seed)
    ops: list[AddOp | StepOp] = []
    arrivals = 0
    for _ in range(steps):
        if rng.random() < ARRIVAL_PROBABILITY:
            prompt = rng.randint(1, max(1, min(cfg.max_model_len // 2, MAX_PROMPT)))
            output = rng.randint(1, max(1, min(MAX_OUTPUT, cfg.max_model_len - prompt - 1)))
            shared = arrivals % 2 == 1
            ops.append(AddOp(f"{prefix}{arrivals}", prompt, output, prefix_group=f"{prefix}sys" if shared else None,
                             prefix_len=min(prompt, 2 * cfg.block_size) if shared else 0))
            arrivals += 1
        ops.append(StepOp())
    return replace(trace, ops=trace.ops + tuple(ops))
