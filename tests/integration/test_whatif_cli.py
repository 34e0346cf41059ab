"""``tokenbudget whatif`` end to end: the table, --json, and bad input as one error line."""
from __future__ import annotations

import io
import json
from contextlib import redirect_stderr, redirect_stdout

import pytest

from tokenbudget.cli import main


def run_cli(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        code = main(["whatif", *argv])
    return code, out.getvalue(), err.getvalue()


def test_effective_budget_json_has_the_changes_numbers():
    code, out, _ = run_cli("--effective-budget", "--json")
    assert code == 0
    budgets = json.loads(out)["effective_budget"]
    assert budgets["vllm-adaptive"]["budget"] == {"1": 8186, "32": 8000, "128": 7424, "1024": 2048}
    assert set(budgets["vllm-static"]["budget"].values()) == {2048}
    assert "refused" in budgets["sglang-0.5.23"]


def test_the_table_names_every_policy_and_concurrency():
    code, out, _ = run_cli("--requests", "6", "--concurrency", "1,4", "--prompt-len", "3000", "--output-len", "16")
    assert code == 0
    rows = [line.split() for line in out.splitlines()]
    assert [r[:2] for r in rows if r and r[0] in ("1", "4")] == [
        ["1", "vllm-static"], ["1", "vllm-adaptive"], ["4", "vllm-static"], ["4", "vllm-adaptive"]]


def test_json_runs_carry_the_percentiles():
    code, out, _ = run_cli("--requests", "4", "--concurrency", "2", "--prompt-len", "100:400", "--output-len", "8",
                           "--json")
    assert code == 0
    doc = json.loads(out)
    assert [r["summary"]["policy"] for r in doc["runs"]] == ["vllm-static", "vllm-adaptive"]
    for r in doc["runs"]:
        assert r["summary"]["ttft_s"]["p50"] > 0 and r["summary"]["requests"] == 4
    assert doc["cost_model"]["kind"] == "roofline"


@pytest.mark.parametrize("argv, named", [
    (("--prompt-len", "0"), "--prompt-len"),
    (("--acceptance", "1.5"), "--acceptance"),
    (("--cost-model", "/nonexistent/cost.json"), "cost model"),
    (("--prompt-len", "20000"), "max_model_len"),
    (("--policy", "no-such-policy"), "unknown policy"),
    (("--concurrency", "0"), "--concurrency"),
    (("--requests", "99999999999"), "--requests"),
    (("--max-num-batched-tokens", "100"), "max_num_batched_tokens"),
    (("-k", "500"), "num_speculative_tokens"),
    (("--method", "magic"), "method"),
    (("--plot", "/proc/whatif"), "--plot"),
    (("--calibrate", "/proc/x/cost.json"), "--calibrate"),
])
def test_bad_input_is_one_error_line(argv, named):
    code, out, err = run_cli("--requests", "2", *argv)
    assert code == 2 and out == ""
    lines = err.strip().splitlines()
    assert len(lines) == 1 and named in lines[0] and "Traceback" not in err


def test_a_shipped_trace_is_timed_under_its_policy_and_another():
    from tokenbudget.spec.corpus import corpus_paths
    path = next(p for p in corpus_paths() if "vllm-adaptive" in p.name)
    code, out, _ = run_cli("--trace", str(path), "--policy", "vllm-static", "--json")
    assert code == 0
    runs = json.loads(out)["runs"]
    assert [r["policy"] for r in runs] == ["vllm-adaptive", "vllm-static"]
    assert runs[0]["requests"] and all("ttft_s" in r for r in runs[0]["requests"].values())
    assert "allows no token" in runs[1]["refused"]  # B = 20 leaves the old rule nothing at S = 16
    code, out, _ = run_cli("--trace", str(path), "--policy", "vllm-static")
    assert code == 0 and "vllm-static: refused" in out


def test_search_writes_a_trace_that_replays(tmp_path):
    out_path = tmp_path / "found.json"
    code, out, _ = run_cli("--search", "15", "--trace-out", str(out_path), "--max-model-len", "4096", "--json")
    assert code == 0 and json.loads(out)["gap_ttft_s"] > 0
    code, _, _ = main_replay(str(out_path))
    assert code == 0


def main_replay(path: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        code = main(["replay", path, "--quiet"])
    return code, out.getvalue(), err.getvalue()


def test_search_needs_two_policies():
    code, _, err = run_cli("--search", "5", "--policy", "vllm-static")
    assert code == 2 and "two policies" in err
