"""``tokenbudget export --vllm-test``: the file it writes, and bad input (exit 2, one line)."""
from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest

from tokenbudget.cli import main
from tokenbudget.harness.vllm.export import VLLM_TESTS_DIR, export_vllm_test, exported_test_name
from tokenbudget.model.findings import FINDINGS
from tokenbudget.spec.corpus import corpus_paths
from tokenbudget.spec.trace import load_trace

F3 = FINDINGS["F3"]
CORPUS = {p.stem: p for p in corpus_paths()}


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def assert_bad_input(code: int, out: str, err: str, words: str) -> None:
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and err.startswith("tokenbudget: error: "), err
    assert words in err


def test_stdout_and_o_give_the_shipped_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    shipped = (VLLM_TESTS_DIR / exported_test_name(F3.trace)).read_text(encoding="utf-8")
    code, out, _ = run(capsys, "export", "--vllm-test", str(F3.trace_path))
    assert code == 0 and out == shipped
    target = tmp_path / "test_f3.py"
    code, out, _ = run(capsys, "export", "--vllm-test", str(F3.trace_path), "-o", str(target), "--quiet")
    assert code == 0 and out == "" and target.read_text(encoding="utf-8") == shipped


def test_an_existing_output_is_refused_and_kept(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    target = tmp_path / "test_mine.py"
    target.write_text("mine\n")
    assert_bad_input(*run(capsys, "export", "--vllm-test", str(F3.trace_path), "-o", str(target)), "give -o a new name")
    assert target.read_text() == "mine\n"


def test_an_output_in_a_missing_folder_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    target = tmp_path / "no" / "test_x.py"
    assert_bad_input(*run(capsys, "export", "--vllm-test", str(F3.trace_path), "-o", str(target)), "no folder")
    assert not target.parent.exists()


@pytest.mark.parametrize("content, words", [
    ("{not json", "invalid JSON"),
    (json.dumps({"format": "tokenbudget.trace/1", "policy": "vllm-adaptive"}), "config"),
])
def test_a_bad_trace_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str], content: str,
                                 words: str) -> None:
    path = tmp_path / "bad.json"
    path.write_text(content)
    code, out, err = run(capsys, "export", "--vllm-test", str(path))
    assert_bad_input(code, out, err, "bad.json")
    assert words in err


@pytest.mark.parametrize("stem, words", [
    ("seed-000-vllm-adaptive", "violates no invariant"),
    ("vllm-static-single-request", "needs a vllm-adaptive trace"),
    ("fastdeploy-reserve-rows-overflow", "needs a vllm-adaptive trace"),
])
def test_traces_without_a_vllm_counterexample_are_refused(capsys: pytest.CaptureFixture[str], stem: str,
                                                          words: str) -> None:
    assert_bad_input(*run(capsys, "export", "--vllm-test", str(CORPUS[stem])), words)


def test_text_from_the_trace_cannot_break_the_file(tmp_path: Path) -> None:
    doc = json.loads(F3.trace_path.read_text())
    nasty = 'x"""\\ \n\x1b]0;'
    doc["description"] = nasty + " " + doc["description"]
    for op in doc["ops"]:
        if op.get("id") == "low":
            op["id"] = nasty
        if "low" in op.get("accepted", {}):
            op["accepted"][nasty] = op["accepted"].pop("low")
    for expectation in doc["expect"]:
        if "preempted" in expectation:
            expectation["preempted"] = [nasty]
    path = tmp_path / 'we"ird \\name.json'
    path.write_text(json.dumps(doc))
    module = ast.parse(export_vllm_test(load_trace(path)))
    assert nasty in {node.value for node in ast.walk(module) if isinstance(node, ast.Constant)}
    assert [node.name for node in module.body if isinstance(node, ast.FunctionDef)][-1] == "test_we_ird_name"


@pytest.mark.parametrize("path", sorted(VLLM_TESTS_DIR.glob("*.py")), ids=lambda p: p.stem)
def test_an_exported_test_imports_only_vllm_torch_and_the_standard_library(path: Path) -> None:
    module = ast.parse(path.read_text(encoding="utf-8"))
    imported = {alias.name for node in ast.walk(module) if isinstance(node, ast.Import) for alias in node.names}
    imported |= {node.module for node in ast.walk(module) if isinstance(node, ast.ImportFrom)}
    assert {name.split(".")[0] for name in imported} == {"json", "zlib", "torch", "vllm"}


def test_a_trace_of_a_policy_derived_from_vllm_adaptive_is_exported_with_the_plugin_note(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A user's change to vLLM's accounting (the README's policy): its input-rows-cap
    counterexample becomes a vLLM test, which names the plugin as what judges that invariant."""
    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parents[2] / "examples"))
    doc = json.loads(CORPUS["seed-000-vllm-adaptive"].read_text())
    doc["policy"], doc["expect"] = "waiting_drafts_free:WaitingDraftsFree", []
    path = tmp_path / "mine.json"
    path.write_text(json.dumps(doc))
    text = export_vllm_test(load_trace(path))
    assert "input-rows-cap has no assert here: run this test under pytest --tokenbudget=strict" in " ".join(text.split())
    assert [n.name for n in ast.parse(text).body if isinstance(n, ast.FunctionDef)][-1] == "test_mine"
