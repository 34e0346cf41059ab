"""FastDeployDifferentialTarget: FastDeploy's ``ResourceManagerV1`` (``FastDeployTarget``) judged in
lockstep against the model of the same policy (``harness.differential``): ``fuzz --target fastdeploy``.

Both sides run the config at the modelled commit the engine folder is compared at
(``conform.modelled_commit``, as ``conform --engine fastdeploy`` compares it): the config's
``engine_version`` is set to that commit, so that the model runs the commit's block rules
(decode preallocation, admission and its reserve, preemption; ``model.fastdeploy.commits``)
whatever engine version the fuzzer drew; the model runs the policy fuzzed (by default the
commit's own: ``fuzz_cmd``), so another policy parts where its budget differs from the commit's.
A parting names the rule as vLLM's and SGLang's do. The trace of a counterexample keeps the
config the fuzzer drew: on ``--target fastdeploy`` it replays at the folder's commit again.
"""
from __future__ import annotations

from pathlib import Path

from ...model import BudgetConfig, BudgetPolicy
from ..differential import Differential
from . import runtime
from .conform import modelled_commit
from .target import FastDeployTarget


class FastDeployDifferentialTarget(Differential, FastDeployTarget):
    """FastDeploy's scheduler judged in lockstep against the model at its commit; raises as
    ``FastDeployTarget``."""

    findings_engine, label = "fastdeploy", "FastDeploy"

    def __init__(self, cfg: BudgetConfig, policy: BudgetPolicy, path: Path | None = None) -> None:
        fd = runtime.load(path)
        self.cfg = cfg.replace(engine_version=modelled_commit(fd["folder"], fd["commit"])[0])
        FastDeployTarget.__init__(self, self.cfg, policy, fd["folder"])
        self.start_reference(policy)
