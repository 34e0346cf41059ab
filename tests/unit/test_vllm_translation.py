"""Our translation of a config for each vLLM version (harness/vllm/speculative.py) and the
scheduler-only platform (harness/vllm/platform.py), without importing vLLM."""
from __future__ import annotations

from types import SimpleNamespace

import pytest

from tokenbudget.harness.unavailable import EngineUnavailable
from tokenbudget.harness.vllm import platform
from tokenbudget.harness.vllm.speculative import TranslationRefused, construction_kwargs, set_method
from tokenbudget.model import BudgetConfig
from tokenbudget.model.vllm.versions import VLLM_VERSIONS

CPU = "vllm.platforms.cpu.CpuPlatform"


def cfg(method: str, parallel: bool) -> BudgetConfig:
    return BudgetConfig(num_speculative_tokens=3, method=method, parallel_drafting=parallel)


@pytest.mark.parametrize("version", ["0.32", "0.33"])
def test_before_0_34_parallel_drafting_is_a_knob_passed_as_asked(version: str) -> None:
    rules = VLLM_VERSIONS[version]
    assert construction_kwargs(cfg("eagle3", True), rules)["parallel_drafting"] is True
    spec = SimpleNamespace(method="ngram", parallel_drafting=False)
    set_method(spec, cfg("dflash", False), rules)
    assert spec.method == "dflash" and spec.parallel_drafting is True  # parallel only, as vLLM sets it


def test_0_34_never_passes_the_deprecated_knob_and_leaves_it_unset() -> None:
    rules = VLLM_VERSIONS["0.34"]
    assert "parallel_drafting" not in construction_kwargs(cfg("dflash", True), rules)
    spec = SimpleNamespace(method="ngram", parallel_drafting=None)
    set_method(spec, cfg("dspark", True), rules)
    assert spec.method == "dspark" and spec.parallel_drafting is None


@pytest.mark.parametrize("method", ["eagle3", "mtp", "ngram", "draft_model"])
def test_0_34_refuses_our_translation_of_parallel_serial_methods_in_one_line(method: str) -> None:
    spec = SimpleNamespace(method="ngram", parallel_drafting=None)
    with pytest.raises(TranslationRefused) as refused:
        set_method(spec, cfg(method, True), VLLM_VERSIONS["0.34"])
    message = str(refused.value)
    assert isinstance(refused.value, EngineUnavailable) and "\n" not in message
    assert message.startswith(f"vLLM 0.34 has no parallel drafting with method '{method}'")
    assert "vLLM 0.32 or 0.33" in message and "parallel_drafting=false" in message
    assert spec.method == "ngram"  # nothing half-set


def test_the_cpu_platform_is_replaced_only_where_it_refuses(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(platform.host, "machine", lambda: "x86_64")
    assert platform.cpu_platform_refuses("0.34.0", CPU, has_triton=False)
    assert platform.cpu_platform_refuses("0.35.0.dev3+gabc", CPU, has_triton=False)
    assert not platform.cpu_platform_refuses("0.33.0", CPU, has_triton=False)  # 0.33 has no such check
    assert not platform.cpu_platform_refuses("0.34.0", CPU, has_triton=True)
    assert not platform.cpu_platform_refuses("0.34.0", "vllm.platforms.cuda.CudaPlatform", has_triton=False)
    monkeypatch.setattr(platform.host, "machine", lambda: "aarch64")  # non-x86 CPUs run without Triton
    assert not platform.cpu_platform_refuses("0.34.0", CPU, has_triton=False)
