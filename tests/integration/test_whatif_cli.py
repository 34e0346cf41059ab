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
