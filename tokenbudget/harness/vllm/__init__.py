"""vLLM's real scheduler (the installed vllm package, or the one in ``--engine-path DIR``) as a
target; ``ENGINE`` describes it to the commands (``harness.registry``)."""
from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Optional

from ..engine_descriptor import CAMPAIGN, CONFORM, EXPORT, FUZZ, MONITOR, OWN_TESTS, REPLAY, EngineDescriptor, Modelled

if TYPE_CHECKING:
    from ...model import BudgetPolicy
    from ...model.target import TargetFactory
    from ...spec.trace import Trace
    from ..conform import ConformEngine


class VllmDescriptor(EngineDescriptor):
    name, label = "vllm", "vLLM"
    supports = frozenset({FUZZ, REPLAY, CONFORM, CAMPAIGN, EXPORT, MONITOR, OWN_TESTS})
    folder_help = "an unpacked vLLM wheel or a vLLM checkout's root, run in a child process (default: the installed vllm)"
    target_help = "vLLM's real scheduler (the installed one, or --engine-path's)"
    findings_name_mechanism = True

    def check_folder(self, path: Optional[Path]) -> Optional[Path]:
        from .folder import engine_folder
        return None if path is None else engine_folder(path)

    def child_env(self, path: Optional[Path]) -> Optional[dict[str, str]]:
        from .folder import child_env, in_child
        return None if path is None or in_child(path) else child_env(path)

    def modelled(self, path: Optional[Path]) -> Modelled:
        from .engine import engine_location
        engine = self.conform_engine(path)  # the importable release, and the nearest modelled version
        return Modelled(engine.release, engine.policy, engine.model_version, engine.warning, engine_location())

    def fuzz_target(self) -> TargetFactory:
        from .differential import DifferentialTarget
        return DifferentialTarget

    def replay_target(self) -> TargetFactory:
        from .target import VllmTarget
        return VllmTarget

    def conform_engine(self, path: Optional[Path], prefix_cache: bool = True,
                       capacity_policy: Optional[str] = None) -> ConformEngine:
        from .conform import vllm_engine
        return vllm_engine()

    def check_policy(self, policy: BudgetPolicy) -> None:
        from ...model import BudgetConfig
        from .differential import DifferentialTarget
        DifferentialTarget(BudgetConfig(), policy)

    def export_test(self, trace: Trace) -> str:
        from .export import export_vllm_test
        return export_vllm_test(trace)

    def fetch_own_tests(self, version: str, dest: Path) -> tuple[str, str]:
        from .own_tests import fetch_tests, fetch_triton, hub_cache, pytest_command
        try:
            fetched = fetch_tests(version, dest)
        except OSError as e:
            raise OSError(f"cannot fetch vllm {version}'s sdist ({e}); check the network or PIP_INDEX_URL") from None
        triton = fetch_triton(version, dest)
        hub_cache(dest / "hf")
        if not (dest / "pytest.ini").exists():
            (dest / "pytest.ini").write_text("[pytest]\n")  # the tests' own options, not a parent folder's
        done = f"{fetched} entries of tests/ unpacked into {dest}" if fetched else f"{dest}/tests kept"
        return done + (f"; {triton}" if triton else ""), pytest_command(dest.resolve(), version)


ENGINE = VllmDescriptor()
