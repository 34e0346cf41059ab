"""What a budget rule costs in latency: the reference scheduler's steps on a virtual clock.

A workload (``workload``) runs on the reference scheduler (``model.scheduler_for``) under each
policy; every step's shape (``step_shape``) goes through a cost model (``cost_*``) onto a
virtual clock (``simulator``); ``metrics`` turns the per-request times into TTFT, TPOT and
inter-token latency. Imports only ``spec`` and ``model``.
"""
