"""EngineDescriptor: what the commands need to know of one real engine, in one object.

Each engine package (``harness/<engine>/__init__.py``) exports one, ``ENGINE``, named in
``harness.registry``. Importing it imports nothing heavy: every method that needs the
engine or the harness around it imports them when called. What it says:

* how the engine is found and loaded: ``check_folder`` (``--engine-path DIR``, its
  environment variable ``path_env``, its default folder; one line naming what is missing and
  the install fix) and ``child_env`` (the environment of the child process it runs in, when
  it runs in one);
* its targets: ``fuzz_target`` (judged in lockstep with the model where the engine has it)
  and ``replay_target``; its conformance engine (``conform_engine``: workloads, lockstep,
  explanations); the model policy and version an engine release maps to (``modelled``);
* what it supports (``supports``: the commands below).
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar, Optional

if TYPE_CHECKING:
    from ..model import BudgetPolicy
    from ..model.target import TargetFactory
    from ..spec.trace import Trace
    from .conform import ConformEngine

FUZZ, REPLAY, CONFORM, CAMPAIGN, EXPORT, MONITOR = "fuzz", "replay", "conform", "campaign", "export", "monitor"
OWN_TESTS = "engine-tests"


@dataclass(frozen=True)
class Modelled:
    """An engine release and what the model compares it with: a policy at a modelled
    version; ``warning`` (one line) when the release itself is not modelled."""

    release: str
    policy: str
    model_version: str
    warning: Optional[str] = None
    location: Optional[str] = None  # where the engine's code was imported from, when known

    def banner(self, label: str) -> str:
        """One line: the engine's release and folder, and the model it is compared with."""
        where = f" from {self.location}" if self.location else ""
        return (f"{label} {self.release}{where}; compared with the model of {label} {self.model_version} "
                f"({self.policy})")


class EngineDescriptor(ABC):
    """One real engine, as the commands see it."""

    name: ClassVar[str]  # the name on the command line (``--target``, ``--engine``)
    label: ClassVar[str]  # the engine as printed
    supports: ClassVar[frozenset[str]]  # of FUZZ, REPLAY, CONFORM, CAMPAIGN, EXPORT, MONITOR, OWN_TESTS
    path_env: ClassVar[Optional[str]] = None  # the environment variable naming its folder
    default_folder: ClassVar[Optional[Path]] = None  # the folder used when neither is given
    folder_help: ClassVar[str]  # what ``--engine-path DIR`` holds for it, a phrase for --help
    target_help: ClassVar[str]  # what runs for ``--target NAME``, a phrase for --help
    findings_name_mechanism: ClassVar[bool] = False  # a fuzz failure is known only where its identity names a finding
    prefix_cache_switch: ClassVar[bool] = False  # its conformance workloads run with the prefix cache on or off
    capacity_policies: ClassVar[tuple[str, ...]] = ()  # the capacity schedulers its conformance can run, default first

    @abstractmethod
    def check_folder(self, path: Optional[Path]) -> Optional[Path]:
        """The folder the engine is loaded from (``path``, else ``path_env``, else
        ``default_folder``; None: the importable one), checked without importing it.
        EngineUnavailable (one line naming the fix) when it holds no engine."""

    @abstractmethod
    def child_env(self, path: Optional[Path]) -> Optional[dict[str, str]]:
        """The environment of the child process that runs this command against the engine in
        ``path``; None when this process runs it (it is that child, or needs none)."""

    @abstractmethod
    def modelled(self, path: Optional[Path]) -> Modelled:
        """The release in ``path`` and the model policy and version it is compared with."""

    @abstractmethod
    def fuzz_target(self) -> TargetFactory:
        """The target ``fuzz --target NAME`` drives (the folder from ``path_env`` in the child)."""

    @abstractmethod
    def replay_target(self) -> TargetFactory:
        """The target ``replay --target NAME`` runs a trace on."""

    @abstractmethod
    def conform_engine(self, path: Optional[Path], prefix_cache: bool = True,
                       capacity_policy: Optional[str] = None) -> ConformEngine:
        """The engine in ``path`` as ``conform`` drives it against the model (under
        ``capacity_policy``, one of ``capacity_policies``, where it has several)."""

    def identity(self, path: Optional[Path]) -> str:
        """The engine in ``path`` as one line: its name, release and resolved folder (``installed``
        for the importable one). The example database keys saved failures by it, so one
        engine's failures never replay on another."""
        folder = self.check_folder(path)
        where = "installed" if folder is None else str(folder.resolve())
        return f"{self.name} {self.modelled(path).release} {where}"

    def check_policy(self, policy: BudgetPolicy) -> None:
        """Raise now (ConfigError, EngineUnavailable) when the fuzz target cannot run ``policy``."""

    def export_test(self, trace: Trace) -> str:
        """The trace as one of the engine's own unit tests (for engines that support EXPORT)."""
        raise NotImplementedError(f"{self.label} has no test export")

    def fetch_own_tests(self, version: str, dest: Path) -> tuple[str, str]:
        """The engine's own scheduler tests of ``version`` and their offline configs fetched into
        ``dest`` (for engines that support OWN_TESTS): (what was fetched, the command that runs
        them under the plugin). ValueError or OSError when the release cannot be had."""
        raise NotImplementedError(f"{self.label} has no own tests to fetch")
