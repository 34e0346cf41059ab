"""``fuzz``, ``check`` and ``prove`` judge a violation alike (``tokenbudget.verdict``): on a
correct user policy, a copy of a known-bad built-in and a buggy user policy, the verdict on
each invariant two commands both found violated is the same, and each command's exit code
follows the one rule (1 when some verdict is the policy's own). ``check`` replays each
corpus trace once per policy."""
from __future__ import annotations

import io
import json
from collections import Counter
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path
from typing import Any

import pytest

from tokenbudget import check, prove_cmd, verdict
from tokenbudget.cli import main
from tokenbudget.model import findings
from tokenbudget.model import replay as replay_module
from tokenbudget.spec.corpus import load_corpus

ROOT = Path(__file__).resolve().parents[2]
PATHS = [ROOT / "examples", ROOT / "tests" / "unit", ROOT / "tests" / "quality"]
CORRECT = "clip_first:ClipFirst"  # the README's loop example: check passes it
KNOWN_BAD_COPY = "verdict_policies:CopyV0"  # fastdeploy-v0 unchanged: its row overflow is the copy's own
BUGGY = "real_bugs.fastdeploy_before_7438:Policy"  # FastDeploy before PR #7438: rows past B
THROTTLED = "verdict_policies:ThrottledPrefill"  # charges a prefill chunk twice: more work undone than its base
FAILS = {CORRECT: False, KNOWN_BAD_COPY: True, BUGGY: True}
OWN_IN_ALL = {KNOWN_BAD_COPY: "input-rows-cap", BUGGY: "input-rows-cap"}


def run(*argv: str) -> tuple[int, dict[str, Any]]:
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        code = main([*argv, "--json", "--quiet"])
    assert err.getvalue() == "", err.getvalue()
    return code, json.loads(out.getvalue())


def judged_by_fuzz(doc: dict[str, Any]) -> dict[str, set[str]]:
    return {invariant: {kind} for invariant, kind in doc["policies"][0]["judged"].items()}


def judged_by_prove(doc: dict[str, Any]) -> dict[str, set[str]]:
    return {o["obligation"]: {o["judged"]} for o in doc["outcomes"] if o["judged"] is not None}


def judged_by_check(doc: dict[str, Any]) -> dict[str, set[str]]:
    out: dict[str, set[str]] = {}
    for v in doc["policies"][0]["judged"]:
        out.setdefault(v["invariant"], set()).add(v["verdict"])
    return out


@pytest.mark.parametrize("policy", list(FAILS))
def test_fuzz_check_and_prove_agree_on_each_violation_and_exit_by_one_rule(
        policy: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for path in PATHS:
        monkeypatch.syspath_prepend(str(path))
    outcomes: list[Any] = []
    real_prove = prove_cmd.prove

    def proved(*args: Any, **kwargs: Any) -> list[Any]:
        outcomes[:] = real_prove(*args, **kwargs)
        return list(outcomes)

    monkeypatch.setattr(prove_cmd, "prove", proved)
    prove_code, prove_doc = run("prove", "--policy", policy)
    # check proves the same policy: it is handed the outcomes just decided (the prover is deterministic)
    monkeypatch.setattr(check, "prove", lambda policies, *a, **k: [o for o in outcomes if o.policy in policies])
    check_code, check_doc = run("check", "--policy", policy, "--database", "none")
    fuzz_code, fuzz_doc = run("fuzz", "--policy", policy, "--examples", str(check.FUZZ_EXAMPLES), "--seed", "0",
                              "--workers", "1", "--database", "none", "--corpus", str(tmp_path))

    judged = {"prove": judged_by_prove(prove_doc), "check": judged_by_check(check_doc),
              "fuzz": judged_by_fuzz(fuzz_doc)}
    for command, verdicts in judged.items():
        assert all(len(kinds) == 1 for kinds in verdicts.values()), (command, verdicts)  # one verdict per invariant
    for invariant in set().union(*judged.values()):
        kinds = {command: verdicts[invariant] for command, verdicts in judged.items() if invariant in verdicts}
        assert len(set().union(*kinds.values())) == 1, (invariant, kinds)
    if policy in OWN_IN_ALL:
        assert all(verdicts.get(OWN_IN_ALL[policy]) == {verdict.OWN} for verdicts in judged.values()), judged
    # the one exit rule: 1 exactly when some verdict is the policy's own (or a gap over its base)
    for command, code in (("prove", prove_code), ("check", check_code), ("fuzz", fuzz_code)):
        own = any(kinds - {verdict.KNOWN} for kinds in judged[command].values())
        assert code == (1 if own else 0) == (1 if FAILS[policy] else 0), (command, code, judged[command])
    assert check_doc["ok"] == fuzz_doc["ok"] == prove_doc["ok"] == (not FAILS[policy])


def test_check_replays_each_corpus_trace_once_per_policy(monkeypatch: pytest.MonkeyPatch) -> None:
    """A user policy's corpus section: its own replay of each trace, its base's once (for the
    work gap and what the base shows), nothing replayed again to judge a violation."""
    for path in PATHS:
        monkeypatch.syspath_prepend(str(path))
    replays: Counter[tuple[str, str]] = Counter()
    original = replay_module.replay_on_model

    def counted(trace: Any, policy: Any = None, *args: Any, **kwargs: Any) -> Any:
        replays[(Path(trace.source).name, policy if isinstance(policy, str) else trace.policy)] += 1
        return original(trace, policy, *args, **kwargs)

    for module in (check, verdict, replay_module, findings):
        monkeypatch.setattr(module, "replay_on_model", counted)
    verdict._REPLAYED.clear()
    monkeypatch.setattr(check, "SECTIONS", (check.corpus_section,))
    report = check.run_check([THROTTLED], strict=True)  # strict: every known violation is judged too
    assert not report.ok  # its work gap over the base fails it, judged on those runs
    traces = {Path(t.source).name for t in load_corpus(findings=False)}
    assert replays and {name for name, _ in replays} <= traces
    assert max(replays.values()) == 1, [key for key, n in replays.items() if n > 1]
    assert {policy for _, policy in replays} == {THROTTLED, "vllm-adaptive"}
    assert sum(policy == THROTTLED for _, policy in replays) == report.rows[0].traces + len(report.skipped)
