"""Bad input never crashes, hangs or eats memory: every command, fed malformed traces,
extreme values and nonsense flags, exits 2 with one line ``tokenbudget: error: ...`` or
gives a clean verdict (0, 1; 130 for Ctrl-C), never a traceback, within a memory bound.

Two generators: mutations of the shipped corpus traces over the trace schema (wrong
types, missing and extra keys, huge and negative integers, deep nesting, odd strings, bad
ops and expectations, broken JSON text) replayed on the model, and argument lists for
every command. Each runs in-process through ``tokenbudget.cli.main``; the commands' own
budgets are kept tiny (``fuzz --examples 2``, ``prove --invariant token-cap``, ``check``
only on user policies that fail fast). Then one explicit case per known root cause.
"""
from __future__ import annotations

import copy
import io
import json
import resource
import signal
import sys
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path
from typing import Any, Iterator

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from tokenbudget import check as check_module
from tokenbudget import fuzz_cmd
from tokenbudget.cli import main
from tokenbudget.exits import BAD_INPUT, FAILED, INTERRUPTED, OK
from tokenbudget.fuzz import session
from tokenbudget.spec import trace as trace_module
from tokenbudget.spec.corpus import corpus_paths

sys.path.insert(0, str(Path(__file__).parent))  # bad_input_policies, for --policy
POLICIES = "bad_input_policies"
CORPUS = sorted(corpus_paths())
SEED = next(p for p in CORPUS if p.stem == "seed-000-vllm-adaptive")
MEMORY_BOUND = 4 * 2**30  # bytes: the process's peak resident memory after any bad input
HANG_BOUND = 120  # seconds: an example still running then is a hang (the commands' budgets are tiny)
SETTINGS = dict(deadline=None, database=None, suppress_health_check=list(HealthCheck))


class Hung(BaseException):  # not an Exception: no target or command may catch it
    pass


def _alarm(signum: int, frame: Any) -> None:
    raise Hung("still running after the hang bound")


def run_cli(*argv: str) -> tuple[int, str, str]:
    """main(argv) with stdout and stderr captured, under the hang bound and the memory bound."""
    out, err = io.StringIO(), io.StringIO()
    previous = signal.signal(signal.SIGALRM, _alarm)
    signal.alarm(HANG_BOUND)
    try:
        with redirect_stdout(out), redirect_stderr(err):
            code = main([str(a) for a in argv])
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # kB on Linux
    assert peak < MEMORY_BOUND, f"{argv}: the process peaked at {peak / 2**20:.0f} MiB"
    return code, out.getvalue(), err.getvalue()


def assert_clean(argv: tuple[str, ...], code: int, out: str, err: str) -> None:
    """Exit 2 with exactly one error line and nothing on stdout, or a verdict; no traceback,
    and nothing printed that a terminal would act on (escape sequences, carriage returns)."""
    assert "Traceback" not in out + err, f"{argv}: {err[-2000:]}"
    assert "\x1b" not in out + err and "\r" not in out + err, argv
    if code == BAD_INPUT:
        assert out == "", argv
        assert err.count("\n") == 1 and err.startswith("tokenbudget: error: "), f"{argv}: {err!r}"
    else:
        assert code in (OK, FAILED), f"{argv}: exit {code}: {err[-2000:]}"


def run_clean(*argv: Any) -> tuple[int, str, str]:
    code, out, err = run_cli(*argv)
    assert_clean(tuple(map(str, argv)), code, out, err)
    return code, out, err


# -- traces: mutations of the corpus over the schema -------------------------------------
HUGE = "9" * 5000  # more digits than Python's int() reads
ODD_STRINGS = ["", " ", "\n", "a\nb", "\x1b[31mred\x1b[0m", "\x00", "\u202eevil", "\ud800", "x" * 20000, "é",
               "0", "vllm-adaptive", "pkg.module:Class", ":", "../../etc/passwd", "NaN"]
ODD_INTS = [0, -1, 1, 2**31, 2**63, -(2**63) - 1, 10**30, 10**9, 10**12, 4301]
MARK = "@@MARK@@"  # a string the JSON text of a raw value replaces


def deep(depth: int) -> Any:
    value: Any = 1
    for _ in range(depth):
        value = [value]
    return value


odd_values = st.one_of(
    st.sampled_from(ODD_INTS), st.integers(), st.sampled_from(ODD_STRINGS), st.text(max_size=20),
    st.floats(allow_nan=False, allow_infinity=False), st.booleans(), st.none(),
    st.builds(deep, st.sampled_from([5, 20, 300])),
    st.just({}), st.just([]), st.just({"op": "add"}), st.just({"op": "teleport"}), st.just({"violation": "nope"}),
    st.just({"step": 10**6}), st.just({"no_violation": False}), st.just({"config_rejected": ""}),
)
RAW_VALUES = ["NaN", "Infinity", "-Infinity", HUGE, "-" + HUGE, "1e999", "1.5", "[" * 3000 + "]" * 3000, "0x10"]


def paths_of(doc: Any, path: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    """Every key path into doc, down to 8 levels (a trace nests 5)."""
    yield path
    if len(path) >= 8:
        return
    if isinstance(doc, dict):
        for key, value in doc.items():
            yield from paths_of(value, (*path, key))
    elif isinstance(doc, list):
        for i, value in enumerate(doc):
            yield from paths_of(value, (*path, i))


def parent_and_key(doc: Any, path: tuple[Any, ...]) -> tuple[Any, Any]:
    for key in path[:-1]:
        doc = doc[key]
    return doc, path[-1]


@st.composite
def mutated_traces(draw: st.DrawFn) -> bytes:
    """The bytes of a corpus trace with a few mutations."""
    doc = json.loads(draw(st.sampled_from(CORPUS)).read_text("utf-8"))
    raw: str | None = None
    for _ in range(draw(st.integers(1, 3))):
        paths = list(paths_of(doc))
        path = draw(st.sampled_from(paths))
        kind = draw(st.sampled_from(["replace", "delete", "add", "raw"] if path else ["replace", "add"]))
        if kind == "add" and not isinstance(_get(doc, path), (dict, list)):
            kind = "replace"
        if kind == "replace":
            value = copy.deepcopy(draw(odd_values))  # st.just gives one object: never mutate it
            if path:
                parent, key = parent_and_key(doc, path)
                parent[key] = value
            else:
                doc = value
        elif kind == "delete":
            parent, key = parent_and_key(doc, path)
            del parent[key]
        elif kind == "add":
            target = _get(doc, path)
            value = copy.deepcopy(draw(odd_values))
            if isinstance(target, dict):
                target[draw(st.sampled_from(["extra", "id", "op", "", "\x1b", "accepted", *ODD_STRINGS[:4]]))] = value
            else:
                target.insert(draw(st.integers(0, len(target))), value)
        elif raw is None:
            parent, key = parent_and_key(doc, path)
            parent[key] = MARK
            raw = draw(st.sampled_from(RAW_VALUES))
    text = json.dumps(doc)
    if raw is not None:
        text = text.replace(json.dumps(MARK), raw, 1)
    data = text.encode("utf-8", "surrogatepass")
    cut = draw(st.sampled_from([None, None, None, "half", "byte"]))
    if cut == "half":
        data = data[: len(data) // 2]
    elif cut == "byte":
        data = data + b"\xff"
    return data


def _get(doc: Any, path: tuple[Any, ...]) -> Any:
    for key in path:
        doc = doc[key]
    return doc


TRACE_FLAGS = st.sampled_from([(), ("--json",), ("--policy", "vllm-static"), ("--policy", f"{POLICIES}:GrantRaises"),
                               ("--target", "vllm"), ("--quiet",)])


@settings(max_examples=300, **SETTINGS)
@given(data=mutated_traces(), flags=TRACE_FLAGS)
def test_a_mutated_trace_gets_a_verdict_or_one_error_line(tmp_path_factory: pytest.TempPathFactory, data: bytes,
                                                          flags: tuple[str, ...]) -> None:
    path = tmp_path_factory.mktemp("trace") / "mutated.json"
    path.write_bytes(data)
    code, out, _ = run_clean("replay", path, *flags)
    event(f"exit {code}")
    if "--json" in flags and code != BAD_INPUT:
        json.loads(out)


# -- flags: argument lists for every command ----------------------------------------------
NUMBERS = ["0", "1", "2", "-1", "nan", "inf", "-inf", "1e9", "1e400", "0.5", "1_000", "", "x", "9" * 30, HUGE, "٣"]
USER = [f"{POLICIES}:{name}" for name in ("Bare", "NoLoop", "InitRaises", "ValidateRaises", "TokenCapRaises",
                                          "GrantRaises", "GrantReturnsText", "ChargeReturnsNone",
                                          "BranchesInPython", "NOT_A_CLASS", "Missing")]
BAD_SPECS = [":", ".rel:X", "nope", "no_such_module:X", "os:path", "", "\x1b[31m", "json:JSONDecoder"]
# check and fuzz on these fail fast (a built-in policy, or one that works on ints, takes tens of seconds)
FAST_POLICIES = [spec for spec in USER if not spec.endswith("BranchesInPython")] + BAD_SPECS


def flag(name: str, values: st.SearchStrategy[str]) -> st.SearchStrategy[tuple[str, ...]]:
    return st.one_of(st.just(()), values.map(lambda v: (name, v)))


def argv(command: str, *parts: st.SearchStrategy[tuple[str, ...]]) -> st.SearchStrategy[tuple[str, ...]]:
    return st.tuples(*parts).map(lambda ps: (command, *(a for p in ps for a in p)))


NUMBER = st.sampled_from(NUMBERS)
BUDGET = st.sampled_from([n for n in NUMBERS if n not in ("1_000", "1e9")])  # fuzz: no budget that runs long
PATHS = st.sampled_from(["EXISTING_FILE", "NEW_DIR", "EXISTING_FILE/x", ""])
POLICY = st.sampled_from(["vllm-adaptive", "fastdeploy-v0", *USER, *BAD_SPECS])
REPLAY_TRACES = st.sampled_from([str(SEED), str(next(p for p in CORPUS if "rows-overflow" in p.stem)),
                                 "EXISTING_FILE", "NEW_DIR", "/nonexistent.json"])

COMMANDS = st.one_of(
    argv("policies", flag("--json", st.just("--json")).map(lambda t: t[1:]), flag("--policy", POLICY)),
    argv("replay", REPLAY_TRACES.map(lambda t: (t,)),
         flag("--target", st.sampled_from(["model", "runner", "vllm", "gpu"])),
         flag("--device", st.sampled_from(["cpu", "cuda", "tpu"])),
         flag("--mode", st.sampled_from(["forced", "live", "random"])),
         flag("--acceptance", st.sampled_from(["greedy", "rejection", "x"])),
         flag("--seed", NUMBER), flag("--steps", st.sampled_from(["0", "1", "3", "-1", "nan", HUGE])),
         flag("--memory-cap", st.just("")).map(lambda t: t[:1]),
         flag("--plot", st.sampled_from(["PLOT.png", "PLOT.pdf", "PLOT", "EXISTING_FILE", "NEW_DIR/sub/p.png"])),
         flag("--policy", POLICY), flag("--json", st.just("")).map(lambda t: t[:1])),
    argv("fuzz", st.sampled_from(FAST_POLICIES).map(lambda p: ("--policy", p)),
         st.one_of(st.just(("--examples", "2")), flag("--examples", BUDGET), flag("--seconds", BUDGET)),
         flag("--seed", NUMBER), flag("--corpus", PATHS), flag("--target", st.sampled_from(["model", "vllm", "x"]))),
    argv("prove", st.sampled_from(USER + BAD_SPECS).map(lambda p: ("--policy", p)),
         st.just(("--invariant", "token-cap")), flag("--invariant", st.sampled_from(["token-cap", "nope", ""])),
         flag("--max-requests", NUMBER), flag("--timeout", NUMBER), flag("--emit-traces", PATHS)),
    argv("check", st.sampled_from(FAST_POLICIES).map(lambda p: ("--policy", p)), flag("--json", st.just("")).map(
        lambda t: t[:1])),
    argv("conform", flag("--engine", st.sampled_from(["vllm", "sglang"])),
         st.sampled_from([("--workloads", "0"), ("--workloads", "1"), ("--workloads", "-1"), ("--workloads", "nan"),
                          ("--workloads", HUGE)]),
         flag("--seed", NUMBER), flag("--corpus", PATHS)),
)


def resolve(args: tuple[str, ...], tmp: Path) -> list[str]:
    """Fill in the placeholders: an existing file, a new folder, a new plot name."""
    existing = tmp / "existing.json"
    existing.write_text("{}")
    names = {"EXISTING_FILE": str(existing), "NEW_DIR": str(tmp / "new"), "PLOT": str(tmp / "plot")}
    out = []
    for a in args:
        for key, value in names.items():
            a = a.replace(key, value)
        out.append(a)
    return out


@settings(max_examples=60, **SETTINGS)
@given(args=COMMANDS)
def test_any_command_line_gets_a_verdict_or_one_error_line(tmp_path_factory: pytest.TempPathFactory,
                                                           args: tuple[str, ...]) -> None:
    code, _, _ = run_clean(*resolve(args, tmp_path_factory.mktemp("flags")))
    event(f"{args[0]} exit {code}")


# -- one case per root cause ---------------------------------------------------------------
def write(tmp_path: Path, doc: Any, name: str = "t.json") -> Path:
    path = tmp_path / name
    path.write_text(doc if isinstance(doc, str) else json.dumps(doc), "utf-8")
    return path


def seed_doc() -> dict[str, Any]:
    return json.loads(SEED.read_text("utf-8"))


def assert_error(words: str, *argv: Any) -> str:
    code, out, err = run_clean(*argv)
    assert code == BAD_INPUT and words in err, err
    return err


@pytest.mark.parametrize("text, words", [
    ("[" * 100_000 + "]" * 100_000, "nested too deep"),
    ('{"a": ' + "[" * 40 + "1" + "]" * 40 + "}", "nested deeper than"),
    (SEED.read_text().replace('"prompt_len": 10', '"prompt_len": ' + HUGE, 1), "ops[0].prompt_len: an integer of 5000"),
    (SEED.read_text().replace('"prompt_len": 10', '"prompt_len": ' + "9" * 25, 1), "ops[0].prompt_len"),
    (SEED.read_text().replace('"max_num_seqs": 16', '"max_num_seqs": 1' + "0" * 30, 1), "config.max_num_seqs"),
    (SEED.read_text().replace('"id": "0"', '"id": "\\ud800"', 1), "ops[0].id: a string holds a lone surrogate"),
    (SEED.read_text().replace('"max_num_seqs": 16', '"max_num_seqs": NaN', 1), "NaN is not a JSON number"),
], ids=["deep-text", "deep-value", "4300-digits", "25-digits", "config-10^30", "surrogate", "nan"])
def test_the_loader_refuses_with_the_key_path(tmp_path: Path, text: str, words: str) -> None:
    assert_error(words, "replay", write(tmp_path, text))


def test_the_loader_refuses_a_file_past_the_size_bound(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(trace_module, "MAX_TRACE_BYTES", 100)
    assert_error("the most a trace file may be", "replay", SEED)


@pytest.mark.parametrize("knob, value", [("num_kv_blocks", 10**15), ("max_num_batched_tokens", 10**12),
                                         ("block_size", 10**7), ("max_num_seqs", 10**9),
                                         ("num_speculative_tokens", 10**6), ("max_model_len", 10**10)])
def test_an_impossible_config_is_refused_naming_the_knob_and_limit(tmp_path: Path, knob: str, value: int) -> None:
    doc = seed_doc()
    doc["config"][knob] = value
    err = assert_error(f"{knob} must be at most", "replay", write(tmp_path, doc))
    assert "lower" in err


@pytest.mark.parametrize("spec, words", [
    (":", "not of the form"), (".rel:X", "not of the form"), (f"{POLICIES}:NOT_A_CLASS", "not a BudgetPolicy"),
    (f"{POLICIES}:NoLoop", "names no scheduling loop"), (f"{POLICIES}:InitRaises", "fix its __init__"),
    ("bad_input_import_raises:X", "raised RuntimeError"), ("bad_input_syntax_error:X", "raised SyntaxError"),
])
def test_a_policy_that_cannot_load_is_one_error_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, spec: str,
                                                     words: str) -> None:
    (tmp_path / "bad_input_import_raises.py").write_text("raise RuntimeError('at import')\n")
    (tmp_path / "bad_input_syntax_error.py").write_text("def broken(:\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    for command in (("replay", SEED), ("fuzz", "--examples", "2"), ("check",), ("prove", "--invariant", "token-cap")):
        assert_error(words, *command, "--policy", spec)


FAILING = [("Bare", "Bare.token_cap"), ("ValidateRaises", "ValidateRaises.validate"),
           ("TokenCapRaises", "TokenCapRaises.token_cap"), ("GrantRaises", "GrantRaises.grant"),
           ("GrantReturnsText", "GrantReturnsText.grant"), ("ChargeReturnsNone", "ChargeReturnsNone.charge")]


@pytest.mark.parametrize("name, method", FAILING)
def test_a_failing_policy_is_a_policy_error_verdict_in_replay(name: str, method: str) -> None:
    code, out, _ = run_clean("replay", SEED, "--policy", f"{POLICIES}:{name}")
    assert code == FAILED and "verdict: policy-error" in out
    assert f"policy-error: {method} (" in out and "bad_input_policies.py:" in out


@pytest.mark.parametrize("name, method", FAILING)
def test_a_failing_policy_is_a_found_failure_in_fuzz_that_replays(tmp_path: Path, name: str, method: str) -> None:
    code, out, _ = run_clean("fuzz", "--policy", f"{POLICIES}:{name}", "--examples", "3", "--corpus", tmp_path,
                             "--json")
    doc = json.loads(out)
    found = doc["policies"][0]["violations"]
    assert code == FAILED and list(found) == ["policy-error"] and method in found["policy-error"]["message"]
    code, out, _ = run_clean("replay", found["policy-error"]["trace"], "--policy", f"{POLICIES}:{name}")
    assert code == FAILED and "verdict: policy-error" in out


@pytest.mark.parametrize("name, method", [("ValidateRaises", "ValidateRaises.validate"),
                                          ("GrantRaises", "GrantRaises.grant")])
def test_a_failing_policy_fails_its_row_in_check(name: str, method: str) -> None:
    code, out, _ = run_clean("check", "--policy", f"{POLICIES}:{name}", "--json")
    row = json.loads(out)["policies"][0]
    assert code == FAILED and not row["ok"] and any(f"policy-error: {method}" in f for f in row["failures"])


@pytest.mark.parametrize("name, words", [("BranchesInPython", "Z3Exception"), ("GrantReturnsText", "returned str"),
                                         ("Bare", "NotImplementedError")])
def test_a_policy_that_fails_on_z3_terms_is_one_error_line_in_prove(name: str, words: str) -> None:
    err = assert_error(words, "prove", "--invariant", "token-cap", "--policy", f"{POLICIES}:{name}")
    assert "bad_input_policies.py:" in err
    if name == "BranchesInPython":
        assert "ite, min_, max_" in err


@pytest.mark.parametrize("argv, words", [
    (("prove", "--timeout", "nan"), "finite"), (("prove", "--timeout", "inf"), "finite"),
    (("fuzz", "--seconds", "nan"), "finite"), (("fuzz", "--seconds", "inf"), "finite"),
    (("prove", "--max-requests", "1000000"), "at most"),
    (("replay", SEED, "--device", "cuda"), "--target runner"), (("replay", SEED, "--mode", "live"), "--target runner"),
    (("replay", SEED, "--target", "runner", "--plot", "x.pdf"), ".png"),
    (("fuzz", "--corpus", ""), "empty path"), (("prove", "--emit-traces", ""), "empty path"),
    (("conform", "--corpus", ""), "empty path"), (("campaign", "--out", ""), "empty path"),
])
def test_a_nonsense_flag_is_one_error_line(argv: tuple[Any, ...], words: str) -> None:
    assert_error(words, *argv)


def test_fuzz_corpus_that_is_a_file_is_refused_before_any_work(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(fuzz_cmd, "fuzz", lambda *a, **k: pytest.fail("fuzzed before refusing --corpus"))
    assert_error("--corpus", "fuzz", "--policy", "vllm-adaptive", "--examples", "2", "--corpus", SEED)


def test_fuzz_examples_bounds_every_example_shrinking_included(tmp_path: Path) -> None:
    code, out, _ = run_clean("fuzz", "--policy", "fastdeploy-v0", "--examples", "30", "--workers", "1",
                             "--corpus", tmp_path, "--json")
    report = json.loads(out)["policies"][0]
    assert report["examples"] == 30 and "input-rows-cap" in report["violations"]
    assert Path(report["violations"]["input-rows-cap"]["program"]).read_text().count("state.") >= 2


def test_ids_and_descriptions_are_printed_escaped_and_cut(tmp_path: Path) -> None:
    doc = seed_doc()
    evil = "a\x1b[2J\nb"
    doc["ops"][0]["id"] = evil
    for op in doc["ops"]:
        if "accepted" in op:
            op["accepted"] = {evil if rid == "0" else rid: n for rid, n in op["accepted"].items()}
    doc["expect"] = [{"step": 0, "num_scheduled_tokens": {evil: 10, "1": 4}}]
    doc["description"] = "x" * 100_000 + "\x1b[31m"
    code, out, _ = run_clean("replay", write(tmp_path, doc))
    assert code == OK
    assert "a\\x1b[2J\\nb:10" in out and "more characters)" in out and len(out) < 5000


def test_ctrl_c_in_check_prints_the_finished_sections_and_exits_130(monkeypatch: pytest.MonkeyPatch) -> None:
    def interrupted(report: Any, progress: Any, database: Any) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(check_module, "SECTIONS", (check_module.corpus_section, interrupted))
    code, out, err = run_cli("check", "--policy", f"{POLICIES}:ValidateRaises")
    assert code == INTERRUPTED and "Traceback" not in err
    assert "interrupted (Ctrl-C) in the interrupted section" in out and "policy-error" in out


def test_ctrl_c_in_fuzz_prints_the_partial_summary_and_exits_130(monkeypatch: pytest.MonkeyPatch,
                                                                  tmp_path: Path) -> None:
    def interrupted(*args: Any, **kwargs: Any) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(session, "run_machine", interrupted)
    code, out, err = run_cli("fuzz", "--policy", "vllm-adaptive", "--examples", "2", "--workers", "1",
                             "--corpus", tmp_path)
    assert code == INTERRUPTED and "Traceback" not in err
    assert "interrupted (Ctrl-C) while fuzzing vllm-adaptive" in out
