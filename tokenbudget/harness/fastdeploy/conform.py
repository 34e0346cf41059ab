"""Conformance of the model's FastDeploy policies with FastDeploy's own ``ResourceManagerV1``
(``target.FastDeployTarget``), one commit at a time, through ``harness.conform.run_conformance``.

The commit is the folder's (``runtime.commit``: its git HEAD, or an archive's name); the
model follows that commit's row of ``model.fastdeploy.commits`` under the policy the row names.
A folder at a commit that is not modelled is compared with the modelled commit whose
scheduler source it matches (``modelled_commit``), with a warning. No divergence is
explained away: each is a finding about FastDeploy or a bug of the model's.
"""
from __future__ import annotations

from functools import partial
from pathlib import Path

from ...model import get_policy
from ...model.fastdeploy.commits import FASTDEPLOY_COMMITS, commit_row
from ...spec.trace import Trace
from ..conform import ConformEngine
from ..lockstep import Lockstep, run_lockstep
from . import runtime
from .target import FastDeployTarget
from .workloads import workload

# What tells the modelled commits apart in resource_manager_v1.py, newest first.
MARKERS = (
    ("564c78d78", "use_new_token_ratio_reserve"),
    ("2a606e361", "is not None and self.config.speculative_config.method is not None"),
    ("b19754c5f", "num_running_decode_reqs"),
    ("43685a98a", "token_budget"),
)


def modelled_commit(folder: Path, commit: str) -> tuple[str, str | None]:
    """The modelled commit ``folder`` (at ``commit``) is compared with, and a warning when it
    is not that commit itself."""
    row = commit_row(commit)
    if row is not None:
        return row.commit, None
    source = (folder / "fastdeploy" / "engine" / "sched" / "resource_manager_v1.py").read_text(errors="replace")
    nearest = next(c for c, marker in MARKERS if marker in source or c == MARKERS[-1][0])
    return nearest, (f"FastDeploy commit {commit} is not modelled (modelled: {', '.join(FASTDEPLOY_COMMITS)}); "
                     f"its scheduler matches {nearest}'s, which the model follows")


def fastdeploy_engine(path: Path | None = None) -> ConformEngine:
    """FastDeploy in ``path`` (see ``runtime.engine_folder``) against the model at its commit.
    Raises FastDeployUnavailable without FastDeploy or Paddle."""
    fd = runtime.load(path)
    modelled, warning = modelled_commit(fd["folder"], fd["commit"])
    policy = FASTDEPLOY_COMMITS[modelled].policy

    def lockstep(trace: Trace) -> Lockstep:
        return run_lockstep(trace, partial(FastDeployTarget, path=fd["folder"]))

    return ConformEngine("fastdeploy", "FastDeploy", fd["commit"], f"{modelled} ({get_policy(policy).version})",
                         warning, policy, lambda seed, index: workload(seed, index, modelled), lockstep,
                         lambda result: None)
