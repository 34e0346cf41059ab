"""Real budget bugs that vLLM, FastDeploy, SGLang and TensorRT-LLM shipped (or nearly shipped),
each written as the user policy or loop variant an engineer would have written
(``real_bugs/``, under 30 lines each): ``tokenbudget check --policy`` must fail each on the
invariant it breaks, with a message that points at the mechanism; correct copies of the
built-ins must pass.

``check`` runs in-process (``run_check``, the library function behind the command), with the
command's own budgets. A bug runs only the check section that catches it (``caught_by``: the
corpus replays, the fuzz run or the proofs), so that the file stays cheap; a copy runs every
section. ``bench/bench_real_bugs.py`` times the whole command on each.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import pytest

from real_bugs.copies import CORRECT_COPIES
from tokenbudget import check
from tokenbudget.check import UNEXPECTED, run_check

HERE = Path(__file__).resolve().parent


@dataclass(frozen=True)
class RealBug:
    module: str  # in real_bugs/, class ``Policy``
    invariants: tuple[str, ...]  # check fails naming one of these (model-error: an exception inside the model)
    mechanism: str  # a regex some failure line of the row matches: what the bug does
    caught_by: str  # the check section that fails it: corpus | fuzz | proofs
    missed: str = ""  # why check does not catch it yet: the test is then a strict expected failure

    @property
    def spec(self) -> str:
        return f"real_bugs.{self.module}:Policy"


ROWS = r"needs \d+ rows|input-rows-cap: refuted"  # the runner's rows past B, in a replay, a fuzz run or a proof
KV_SHORT = r"holds \d+ KV slots but .* writes to \d+"  # a verify writes past the KV its decode reserved
# a decode reserved too little for what its drafter writes past the verified tokens (the method table's L)
DRAFTER_KV_SHORT = r"holds \d+ KV slots but the {} drafter writes to \d+ \(computed \d+ \+ granted \d+ \+ drafter \d+"

BUGS = (
    RealBug("vllm_49097_cursor", ("work-conserving",), r"leaves \d+ tokens of work undone, its base", "corpus"),
    RealBug("vllm_16087_running_clip", ("model-len",), r"computed \d+ \+ granted \d+ \+ 1 sampled > max_model_len",
            "fuzz"),
    RealBug("vllm_16087_padding_gate", ("model-len",), r"computed \d+ \+ granted \d+ \+ 1 sampled > max_model_len",
            "fuzz"),
    RealBug("vllm_rollback_scheduled_list", ("token-cap", "kv-capacity", "model-error", "target-error"),
            r"refuted|preempt|holds 0 KV slots but .* writes to", "corpus"),
    RealBug("vllm_44123_negative_t", ("token-cap", "config-sound", "progress"), r"T=-\d", "proofs"),
    RealBug("vllm_52922_prefill_throttle", ("work-conserving",), r"gap", "corpus"),
    RealBug("vllm_refund_forgets_draft_slots", ("exact-refund",), r"returned .* but its grant of \d+ charged", "corpus"),
    RealBug("vllm_refund_twice", ("exact-refund",), r"returned .* but its grant of \d+ charged", "corpus"),
    RealBug("vllm_exit_rule_loose", ("model-error", "target-error"), r"granted 0", "fuzz"),
    RealBug("vllm_exit_rule_strict", ("progress", "config-sound"), r"granted none|cannot schedule|unfinished after",
            "proofs"),
    RealBug("vllm_static_s_minus_1", ("input-rows-cap",), ROWS, "fuzz"),
    RealBug("fastdeploy_before_7438", ("input-rows-cap",), ROWS, "corpus"),
    RealBug("fastdeploy_7438_floor", ("input-rows-cap",), ROWS, "corpus"),
    RealBug("fastdeploy_7623_mtp_only", ("input-rows-cap",),
            r"needs \d+ rows|input-rows-cap: refuted \(B=\d+, S=\d+, k=\d+, ngram", "corpus"),
    RealBug("sglang_14942_retract_multiplier", ("kv-capacity",), KV_SHORT, "corpus"),
    RealBug("sglang_14180_page_boundary", ("kv-capacity",), KV_SHORT, "corpus"),
    RealBug("sglang_9989_retract_tokens", ("kv-capacity",), r"kv-capacity: refuted.*pool \d+ x (3[2-9]|[4-9]\d|\d{3});",
            "proofs"),
    RealBug("trtllm_16101_one_model_unreserved", ("input-rows-cap",), ROWS, "corpus"),
    RealBug("vllm_16370_eagle_no_lookahead", ("kv-capacity",), DRAFTER_KV_SHORT.format("eagle3"), "corpus"),
    RealBug("vllm_42971_dflash_lookahead_k", ("kv-capacity",), DRAFTER_KV_SHORT.format("dflash"), "fuzz"),
)
# The same policies reserving the lookahead the method table says the drafter writes.
FIXED = ("vllm_16370_eagle_no_lookahead:Fixed", "vllm_42971_dflash_lookahead_k:Fixed")
MODULES = [b.module for b in BUGS]
CASES = [pytest.param(b, marks=pytest.mark.xfail(strict=True, reason=b.missed)) if b.missed else b for b in BUGS]


@pytest.fixture(autouse=True)
def real_bugs_importable(monkeypatch):
    monkeypatch.syspath_prepend(str(HERE))


SECTION = {"corpus": check.corpus_section, "fuzz": check.fuzz_section, "proofs": check.proofs_section}


def test_each_bug_is_short():
    for module in MODULES:
        lines = (HERE / "real_bugs" / f"{module}.py").read_text().splitlines()
        assert len(lines) < 30, module


@pytest.mark.parametrize("bug", CASES, ids=MODULES)
def test_check_fails_on_the_real_bug(bug, monkeypatch):
    monkeypatch.setattr(check, "SECTIONS", (SECTION[bug.caught_by],))
    report = run_check([bug.spec])
    row = report.rows[0]
    assert not report.ok, f"{bug.module} passed check"
    named = [f for f in row.failures if any(i in f for i in bug.invariants)]
    cells = [i for i in bug.invariants if row.cells.get(i) == UNEXPECTED]
    assert named or cells, row.failures
    assert any(re.search(bug.mechanism, f) for f in row.failures), row.failures
    assert not [f for f in row.failures if "Traceback" in f or ": unknown" in f], \
        row.failures


@pytest.mark.parametrize("spec", CORRECT_COPIES + FIXED)
def test_check_passes_a_correct_copy(spec):
    report = run_check([f"real_bugs.{spec}"])
    assert report.ok, report.rows[0].failures


def test_the_traces_a_replay_failed_on_are_handed_to_the_prover(monkeypatch):
    """The corpus replays fail exact-refund for a refund that forgets the draft slots; those traces go
    to the prover as counterexamples found already, and the prover still refutes it (a trace no larger)."""
    monkeypatch.setattr(check, "SECTIONS", (check.corpus_section, check.proofs_section))
    report = run_check(["real_bugs.vllm_refund_forgets_draft_slots:Policy"])
    row = report.rows[0]
    assert row.own and all(t.policy == row.policy and not t.expect for t in row.own)
    assert row.cells["exact-refund"] == UNEXPECTED, row.cells
    assert [f for f in row.failures if f.startswith("prove:") and "exact-refund: refuted" in f], row.failures
    assert row.cells["token-cap"] == "ok" and row.cells["input-rows-cap"] == "ok", row.cells


@pytest.mark.parametrize("bug", [b for b in BUGS if b.caught_by == "proofs"], ids=lambda b: b.module)
def test_fuzzing_from_the_provers_counterexamples_shows_the_bug_on_a_run(bug, monkeypatch):
    """The bugs only the prover catches: fuzzing that starts from its counterexamples shows one
    of the bug's invariants broken on a run from an empty system, judged as fuzzing judges."""
    monkeypatch.setattr(check, "SECTIONS", (check.proofs_section, check.fuzz_from_proofs_section))
    row = run_check([bug.spec]).rows[0]
    fuzzed = [f for f in row.failures if f.startswith("fuzz (seed 0, 25 examples from the prover's counterexamples)")]
    assert row.refuted and any(i in f for f in fuzzed for i in bug.invariants), row.failures
