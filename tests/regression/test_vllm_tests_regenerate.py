"""The exported vLLM test of each vLLM finding (tokenbudget/corpus/vllm_tests/) is what
``tokenbudget export --vllm-test`` writes for its trace today, character for character."""
from __future__ import annotations

import pytest

from tokenbudget.harness.vllm.export import VLLM_TESTS_DIR, export_vllm_test, exported_test_name
from tokenbudget.model.findings import findings_of
from tokenbudget.spec.trace import load_trace

pytestmark = pytest.mark.regression


def test_the_exported_tests_are_those_of_the_vllm_findings() -> None:
    assert findings_of("vllm")
    assert sorted(p.name for p in VLLM_TESTS_DIR.glob("*.py")) == sorted(
        exported_test_name(f.trace) for f in findings_of("vllm"))


@pytest.mark.parametrize("finding", findings_of("vllm"), ids=lambda f: f.id)
def test_the_exported_test_regenerates_identically(finding) -> None:
    shipped = (VLLM_TESTS_DIR / exported_test_name(finding.trace)).read_text(encoding="utf-8")
    assert export_vllm_test(load_trace(finding.trace_path)) == shipped, (
        f"regenerate: tokenbudget export --vllm-test {finding.trace_path} -o <new file>")
