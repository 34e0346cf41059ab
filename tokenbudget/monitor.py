"""``tokenbudget.monitor``: judge vLLM's live schedulers by the spec's invariants.

    from tokenbudget import monitor
    with monitor.watch() as m:          # every Scheduler built in the block
        ...                             # run vLLM, or its tests
    assert not m.violations, m.violations[0]

    m = monitor.attach(scheduler)       # one scheduler built elsewhere

Each violation names the scheduler, the invariant, the step and its StepRecord
(``tokenbudget/harness/vllm/monitor.py``). ``pytest --tokenbudget=report|strict`` runs it around every test.
"""
from __future__ import annotations

from .harness.vllm.monitor import Monitor, MonitorStats, MonitorViolation, attach, watch

__all__ = ["Monitor", "MonitorStats", "MonitorViolation", "attach", "watch"]
