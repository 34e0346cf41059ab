"""``check``, ``fuzz`` and ``replay`` judging user policies: model-error, inconsistent loop
flags, a symbolic branch stopping ``check`` after what it finished, ``--strict`` and
``--max-work-gap``, and nothing written into the current directory."""
from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from contextlib import redirect_stderr, redirect_stdout
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import z3

from tokenbudget import check
from tokenbudget.cli import main
from tokenbudget.proofs.verdicts import REFUTED, Outcome
from tokenbudget.spec.corpus import FINDINGS_DIR, load_corpus
from tokenbudget.spec.trace import load_trace

UNIT = Path(__file__).parents[1] / "unit"  # verdict_policies
INTEGRATION = Path(__file__).parent  # bad_input_policies
sys.path[:0] = [str(UNIT), str(INTEGRATION)]
COPY, THROTTLED = "verdict_policies:CopyAdaptive", "verdict_policies:ThrottledPrefill"


def run(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        code = main(list(argv))
    return code, out.getvalue(), err.getvalue()


def run_process(cwd: Path, *argv: str, code: str = "") -> subprocess.CompletedProcess[str]:
    """The command in its own process, run from ``cwd`` with a cache of its own; ``code``
    runs first (a patch of the check's sections)."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(UNIT), os.environ.get("PYTHONPATH", "")]),
           "XDG_CACHE_HOME": str(cwd.parent / "cache")}
    for name in ("TOKENBUDGET_DATABASE", "HYPOTHESIS_STORAGE_DIRECTORY"):
        env.pop(name, None)
    script = f"import sys\n{code}\nfrom tokenbudget.cli import main\nsys.exit(main({[*argv, '--quiet']!r}))"
    return subprocess.run([sys.executable, "-c", script], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=600)


def test_an_exception_inside_the_model_is_a_model_error_whose_trace_replays(tmp_path: Path) -> None:
    cwd, corpus = tmp_path / "cwd", tmp_path / "corpus"
    cwd.mkdir()
    done = run_process(cwd, "fuzz", "--policy", "verdict_policies:Crashing", "--examples", "30", "--workers", "1",
                       "--corpus", str(corpus), "--json")
    found = json.loads(done.stdout)["policies"][0]["violations"]
    # a failure is keyed by its identity: the invariant and, for a crash, its raising site
    assert done.returncode == 1 and len(found) == 1, (done.stdout, done.stderr)
    (identity, crash), = found.items()
    assert identity.startswith("model-error@verdict_policies.py:") and crash["invariant"] == "model-error", found
    assert "planted crash in the output update (verdict_policies.py:" in crash["message"]
    code, out, _ = run("replay", crash["trace"], "--policy", "verdict_policies:Crashing")
    assert code == 1 and "violated, as expected (model-error)" in out
    # the example database went to the user's cache, nothing to the current directory
    assert list(cwd.iterdir()) == [] and (tmp_path / "cache" / "tokenbudget" / "examples").is_dir()


def test_check_leaves_nothing_in_the_current_directory(tmp_path: Path) -> None:
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    patch = "import tokenbudget.check as c\nc.FUZZ_EXAMPLES = 5\nc.SECTIONS = c.SECTIONS[:2]"
    done = run_process(cwd, "check", "--policy", COPY, code=patch)
    assert done.returncode == 0 and "verdict: ok" in done.stdout, done.stdout + done.stderr
    assert list(cwd.iterdir()) == []


@pytest.mark.parametrize("command", [["fuzz", "--examples", "2", "--workers", "1"], ["check"], ["prove"]])
def test_inconsistent_loop_flags_are_one_error_line(command: list[str]) -> None:
    code, out, err = run(*command, "--policy", "verdict_policies:PaddedWithoutDrafts")
    assert code == 2 and out == "" and err.count("\n") == 1
    assert "pads_short_admissions=True with drafts_in_grant=False" in err and "set drafts_in_grant = True" in err


def test_a_symbolic_branch_stops_check_after_the_finished_sections(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(check, "FUZZ_EXAMPLES", 5)
    code, out, err = run("check", "--policy", "bad_input_policies:BranchesInPython")
    assert code == 2 and err.count("\n") == 1 and "Traceback" not in err
    assert "BranchesInPython.grant (" in err and "bad_input_policies.py:" in err and "ite, min_, max_" in err
    row = next(line for line in out.splitlines() if line.startswith("bad_input_policies:BranchesInPython"))
    assert " ok " in row and f" {len(load_corpus(findings=False))} " in row  # the corpus's and fuzz's cells are kept
    assert "stopped in the proofs: policy-error: BranchesInPython.grant" in out and "verdict: FAIL" in out


def test_a_z3_exception_outside_the_policy_methods_names_the_users_function(monkeypatch: pytest.MonkeyPatch) -> None:
    from verdict_policies import branches_in_python

    def proofs(report: Any, progress: Any, database: Any) -> None:
        branches_in_python(z3.Int("x"))

    monkeypatch.setattr(check, "SECTIONS", (check.corpus_section, proofs))
    code, out, err = run("check", "--policy", COPY)
    assert code == 2 and err.count("\n") == 1 and "Traceback" not in err
    assert "branches_in_python (" in err and "verdict_policies.py:" in err and "Z3Exception" in err
    assert "stopped in the proofs: policy-error: branches_in_python" in out


def test_strict_fails_known_violations(monkeypatch: pytest.MonkeyPatch) -> None:
    f1 = load_trace(FINDINGS_DIR / "f1-vllm-adaptive-padded-threshold.json")

    def prove(policies: Any, *args: Any, **kwargs: Any) -> list[Outcome]:
        return [Outcome(p, "spec-shape", REFUTED, "search", 0.0, "planted", traces=(f1,)) for p in policies]

    monkeypatch.setattr(check, "prove", prove)
    monkeypatch.setattr(check, "SECTIONS", (check.proofs_section,))
    code, out, _ = run("check", "--policy", COPY)
    assert code == 0 and "prove: spec-shape refuted (known: finding F1" in out
    code, out, _ = run("check", "--policy", COPY, "--strict")
    assert code == 1 and "known (finding F1" in out and "failing under --strict" in out


def test_more_undone_work_than_the_base_fails_unless_accepted(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(check, "SECTIONS", (check.corpus_section,))
    code, out, _ = run("check", "--policy", THROTTLED, "--json")
    row = json.loads(out)["policies"][0]
    assert code == 1 and row["cells"]["work-conserving"] == "UNEXPECTED"
    assert any("seed-000-vllm-adaptive.json: work-conserving: step 0 leaves 4 tokens of work undone, its base "
               "vllm-adaptive 0 on the same state" in f for f in row["failures"])
    assert any("seed-000-vllm-adaptive-dflash-0.33.json: work-conserving: step 0 leaves 10 tokens" in f
               for f in row["failures"])
    assert any("fastdeploy-decode-count-full-batch-fixpoint.json: work-conserving: step 0 leaves 32 tokens" in f
               for f in row["failures"])  # the widest gap of the corpus: 32 prompts of 8 waiting, B = 64
    code, out, _ = run("check", "--policy", THROTTLED, "--max-work-gap", "31")
    assert code == 1 and "(--max-work-gap 31)" in out
    code, out, _ = run("check", "--policy", THROTTLED, "--max-work-gap", "32")
    assert code == 0 and "verdict: ok" in out
    code, out, _ = run("check", "--policy", COPY)
    assert code == 0


def test_a_prover_that_stops_on_a_user_policy_fails_its_row_in_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    def prove(policies: Any, *args: Any, **kwargs: Any) -> list[Outcome]:
        if policies:  # the built-ins are proved first, together: here none
            raise RuntimeError("the model raised under the prover")
        return []

    monkeypatch.setattr(check, "prove", prove)
    monkeypatch.setattr(check, "SECTIONS", (check.corpus_section, check.proofs_section))
    code, out, err = run("check", "--policy", COPY)
    assert code == 1 and "Traceback" not in err
    assert "prove: the prover stopped on this policy: the model raised under the prover" in out
    assert "sections: corpus" in out and "proofs" in out


def test_fuzzing_starts_from_the_provers_own_counterexamples_only(monkeypatch: pytest.MonkeyPatch,
                                                                   tmp_path: Path) -> None:
    sys.path.insert(0, str(Path(__file__).parents[1] / "quality"))  # real_bugs
    retract = load_trace(Path(check.__file__).parent / "corpus" / "sglang-v1-retract-decode-oom.json")
    f1 = load_trace(FINDINGS_DIR / "f1-vllm-adaptive-padded-threshold.json")
    bug = "real_bugs.sglang_14942_retract_multiplier:Policy"

    def prove(policies: Any, *args: Any, **kwargs: Any) -> list[Outcome]:
        trace = {bug: retract, COPY: f1}
        return [Outcome(p, "kv-capacity" if p == bug else "spec-shape", REFUTED, "search", 0.0, "planted",
                        traces=(replace(trace[p], policy=p, expect=()),)) for p in policies]

    monkeypatch.setattr(check, "prove", prove)
    monkeypatch.setattr(check, "SECTIONS", (check.proofs_section, check.fuzz_from_proofs_section))
    code, out, _ = run("check", "--policy", bug, "--policy", COPY, "--corpus", str(tmp_path), "--json")
    rows = {row["policy"]: row for row in json.loads(out)["policies"]}
    assert code == 1 and rows[COPY]["fuzz"] is None  # its refutation is known: nothing to start from
    assert rows[bug]["fuzz"]["examples"] >= 1 and any(
        f.startswith("fuzz (seed 0, 25 examples from the prover's counterexamples): kv-capacity")
        for f in rows[bug]["failures"]), rows[bug]["failures"]
    assert any(p.name.endswith("-fuzz-from-proofs-kv-capacity.json") for p in tmp_path.iterdir())
