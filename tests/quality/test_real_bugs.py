"""Real budget bugs that vLLM and FastDeploy shipped (or nearly shipped), each written as the
user policy or loop variant an engineer would have written (``real_bugs/``, under 30
lines each): ``tokenbudget check --policy`` must fail each on the invariant it breaks, with
a message that points at the mechanism; correct copies of the built-ins must pass.

``check`` runs in-process (``run_check``, the library function behind the command), with
the command's own budgets: its verdict is the one a user gets.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import pytest

from tokenbudget.check import UNEXPECTED, run_check

HERE = Path(__file__).resolve().parent


@dataclass(frozen=True)
class RealBug:
    module: str  # in real_bugs/, class ``Policy``
    invariants: tuple[str, ...]  # check fails naming one of these (model-error: an exception inside the model)
    mechanism: str  # a regex some failure line of the row matches: what the bug does

    @property
    def spec(self) -> str:
        return f"real_bugs.{self.module}:Policy"


ROWS = r"needs \d+ rows|input-rows-cap: refuted"  # the runner's rows past B, in a replay, a fuzz run or a proof

BUGS = (
    RealBug("vllm_49097_cursor", ("work-conserving",), r"gap"),
    RealBug("vllm_16087_running_clip", ("model-len",), r"computed \d+ \+ granted \d+ \+ 1 sampled > max_model_len"),
    RealBug("vllm_16087_padding_gate", ("model-len",), r"computed \d+ \+ granted \d+ \+ 1 sampled > max_model_len"),
    RealBug("vllm_rollback_scheduled_list", ("token-cap", "kv-capacity", "model-error", "target-error"),
            r"refuted|preempt"),
    RealBug("vllm_44123_negative_t", ("token-cap", "config-sound", "progress"), r"T=-\d"),
    RealBug("vllm_52922_prefill_throttle", ("work-conserving",), r"gap"),
    RealBug("vllm_refund_forgets_draft_slots", ("exact-refund",), r"returned .* but its grant of \d+ charged"),
    RealBug("vllm_refund_twice", ("exact-refund",), r"returned .* but its grant of \d+ charged"),
    RealBug("vllm_exit_rule_loose", ("model-error", "target-error"), r"granted 0"),
    RealBug("vllm_exit_rule_strict", ("progress", "config-sound"), r"granted none|cannot schedule|unfinished after"),
    RealBug("vllm_static_s_minus_1", ("input-rows-cap",), ROWS),
    RealBug("fastdeploy_before_7438", ("input-rows-cap",), ROWS),
    RealBug("fastdeploy_7438_floor", ("input-rows-cap",), ROWS),
    RealBug("fastdeploy_7623_mtp_only", ("input-rows-cap",),
            r"needs \d+ rows|input-rows-cap: refuted \(B=\d+, S=\d+, k=\d+, ngram"),
)

COPIES = ("copies:VllmAdaptiveCopy", "copies:VllmLoopCopy", "copies:FastDeploySpecMethodCopy")


@pytest.fixture(autouse=True)
def real_bugs_importable(monkeypatch):
    monkeypatch.syspath_prepend(str(HERE))


def test_each_bug_is_short():
    for bug in BUGS:
        lines = (HERE / "real_bugs" / f"{bug.module}.py").read_text().splitlines()
        assert len(lines) < 30, bug.module


@pytest.mark.parametrize("bug", BUGS, ids=lambda b: b.module)
def test_check_fails_on_the_real_bug(bug):
    report = run_check([bug.spec])
    row = report.rows[0]
    assert not report.ok, f"{bug.module} passed check"
    named = [f for f in row.failures if any(i in f for i in bug.invariants)]
    cells = [i for i in bug.invariants if row.cells.get(i) == UNEXPECTED]
    assert named or cells, row.failures
    assert any(re.search(bug.mechanism, f) for f in row.failures), row.failures
    assert not [f for f in row.failures if "unknown" in f or "Traceback" in f], row.failures


@pytest.mark.parametrize("spec", COPIES)
def test_check_passes_a_correct_copy(spec):
    report = run_check([f"real_bugs.{spec}"])
    assert report.ok, report.rows[0].failures
