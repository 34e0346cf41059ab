"""The engine registry: each line's package describes its engine, and the commands offer
exactly the registered engines that support them (a new engine is one package and one line)."""
from __future__ import annotations

import argparse
import sys
import types
from pathlib import Path
from typing import Optional

import pytest

from tokenbudget.cli import build_parser
from tokenbudget.harness import registry
from tokenbudget.harness.engine_descriptor import (CAMPAIGN, CONFORM, EXPORT, FUZZ, MONITOR, OWN_TESTS, REPLAY,
                                                   EngineDescriptor, Modelled)
from tokenbudget.harness.unavailable import EngineUnavailable

CAPABILITIES = {FUZZ, REPLAY, CONFORM, CAMPAIGN, EXPORT, MONITOR, OWN_TESTS}


def choices(command: str, dest: str) -> tuple[str, ...]:
    sub = next(a for a in build_parser([command])._actions if isinstance(a, argparse._SubParsersAction))
    action = next(a for a in sub.choices[command]._actions if a.dest == dest)
    assert action.choices is not None
    return tuple(action.choices)


def test_each_line_names_the_package_that_describes_it() -> None:
    assert registry.names() == tuple(registry.ENGINES)
    for name in registry.names():
        engine = registry.engine(name)
        assert engine.name == name and engine.label and engine.supports <= CAPABILITIES, name
    assert registry.find("model") is None and registry.find("runner") is None


def test_the_commands_offer_the_registered_engines() -> None:
    assert choices("fuzz", "target") == ("model", *registry.names(FUZZ))
    assert choices("campaign", "target") == ("model", *registry.names(CAMPAIGN))
    assert choices("conform", "engine") == registry.names(CONFORM)
    assert choices("engine-tests", "engine") == registry.names(OWN_TESTS)
    assert set(choices("replay", "target")) == {"model", "runner", *registry.names(REPLAY)}
    assert "sglang" in registry.names(REPLAY)


class _Fake(EngineDescriptor):
    name, label = "fake", "Fake"
    supports = frozenset({FUZZ, REPLAY})
    folder_help = target_help = "a fake engine"

    def check_folder(self, path: Optional[Path]) -> Optional[Path]:
        return path

    def child_env(self, path: Optional[Path]) -> Optional[dict[str, str]]:
        return None

    def modelled(self, path: Optional[Path]) -> Modelled:
        return Modelled("1", "vllm-adaptive", "0.32")

    def fuzz_target(self):  # type: ignore[no-untyped-def]
        raise NotImplementedError

    def replay_target(self):  # type: ignore[no-untyped-def]
        raise NotImplementedError

    def conform_engine(self, path: Optional[Path], prefix_cache: bool = True):  # type: ignore[no-untyped-def]
        raise NotImplementedError


def test_a_new_engine_is_one_package_and_one_registry_line(monkeypatch: pytest.MonkeyPatch) -> None:
    package = types.ModuleType("tokenbudget.harness.fake")
    package.ENGINE = _Fake()  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, package.__name__, package)
    monkeypatch.setitem(registry.ENGINES, "fake", "fake")
    assert "fake" in choices("fuzz", "target") and "fake" in choices("replay", "target")
    assert "fake" not in choices("conform", "engine") and "fake" not in choices("campaign", "target")


def test_where_each_engine_runs(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """The folder checks name the fix; a child's environment marks it, and the child runs the engine itself."""
    vllm, sglang, fastdeploy = (registry.engine(n) for n in ("vllm", "sglang", "fastdeploy"))
    assert vllm.child_env(None) is None  # the installed vLLM runs here
    with pytest.raises(EngineUnavailable, match="holds no vllm package"):
        vllm.child_env(tmp_path)
    with pytest.raises(EngineUnavailable, match="pip install --no-deps --target"):
        sglang.child_env(tmp_path)
    monkeypatch.delenv("TOKENBUDGET_FASTDEPLOY_PATH", raising=False)
    with pytest.raises(EngineUnavailable, match="--engine-path DIR or set \\$TOKENBUDGET_FASTDEPLOY_PATH"):
        fastdeploy.child_env(None)
    for engine, package in ((vllm, "vllm"), (sglang, "sglang")):
        (tmp_path / package).mkdir()
        (tmp_path / package / "__init__.py").write_text("")
        env = engine.child_env(tmp_path)
        assert env is not None and str(tmp_path.resolve()) in env.values(), engine.name
        monkeypatch.setattr("os.environ", env)
        assert engine.child_env(tmp_path) is None, engine.name  # this process is the child
