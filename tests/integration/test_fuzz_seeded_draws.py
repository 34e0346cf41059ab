"""A fuzz seed draws the same examples whatever modules the process has loaded before."""
import importlib
import sys

from tokenbudget.fuzz.session import fuzz


def _fingerprint(report):
    return report.examples, report.steps, sorted(report.coverage.items()), \
        [(c.kind, c.message) for c in report.counterexamples]


def test_loading_a_module_full_of_constants_does_not_change_the_draws(tmp_path, monkeypatch):
    before = _fingerprint(fuzz("vllm-adaptive", examples=30, seed=3))
    constants = ", ".join(str(n) for n in range(5, 4000, 7))
    (tmp_path / "many_constants.py").write_text(f"VALUES = ({constants})\nNAMES = ('mtp', 'ngram', 'fcfs')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    importlib.import_module("many_constants")
    try:
        after = _fingerprint(fuzz("vllm-adaptive", examples=30, seed=3))
    finally:
        sys.modules.pop("many_constants", None)
    assert after == before
