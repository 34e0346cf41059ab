"""The trace loader: schema sync, round trips, and one-line rejections for every class of bad input."""
from __future__ import annotations

import copy
import json
from dataclasses import MISSING, fields
from pathlib import Path
from unittest import mock

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tokenbudget.spec.corpus import corpus_paths
from tokenbudget.model import BudgetConfig
from tokenbudget.spec import trace as trace_module
from tokenbudget.spec.trace import (
    FORMAT, ITEM_CLASSES, MAX_DEPTH, SCHEMA, AbortOp, AddOp, NoViolationExpectation, StepExpectation, StepOp, Trace,
    TraceError, ViolationExpectation, dump_trace, format_trace, load_trace, parse_trace, write_trace,
)

VALID: dict = {
    "format": "tokenbudget.trace/1",
    "policy": "vllm-adaptive",
    "description": "two requests",
    "config": {"max_num_batched_tokens": 20, "max_num_seqs": 16, "num_speculative_tokens": 4,
               "method": "ngram", "parallel_drafting": True, "max_num_scheduled_tokens": None},
    "ops": [
        {"op": "add", "id": "0", "prompt_len": 10, "max_tokens": 16},
        {"op": "add", "id": "1", "prompt_len": 10, "max_tokens": 16, "priority": 2,
         "prefix_group": "sys", "prefix_len": 8},
        {"op": "step", "accepted": {"0": 2}},
        {"op": "step"},
        {"op": "abort", "id": "1"},
    ],
    "expect": [
        {"step": 0, "num_scheduled_tokens": {"0": 10, "1": 4}, "preempted": []},
        {"step": 1, "scheduled_draft_tokens": {"0": 4}},
        {"violation": "input-rows-cap"},
    ],
}


def with_change(path: str, value: object) -> dict:
    """VALID with the value at a dotted path (list indices as numbers) replaced; DELETE removes it."""
    doc = copy.deepcopy(VALID)
    *parents, last = path.split(".")
    node = doc
    for key in parents:
        node = node[int(key)] if isinstance(node, list) else node[key]
    index = int(last) if isinstance(node, list) else last
    if value is DELETE:
        del node[index]
    else:
        node[index] = value
    return doc


DELETE = object()

# (document, key path in the message, words in the message, structural: the schema alone rejects it)
REJECTIONS = [
    ([], "", "expected an object, got an array", True),
    (with_change("format", "tokenbudget.trace/2"), "format", 'expected "tokenbudget.trace/1"', True),
    (with_change("policy", DELETE), "policy", "missing key", True),
    (with_change("ops", DELETE), "ops", "missing key", True),
    (with_change("extra", 1), "extra", "unknown key", True),
    (with_change("config.max_num_seqs", True), "config.max_num_seqs", "expected an integer, got true", True),
    # JSON Schema counts 16.0 as an integer; like BudgetConfig, the loader does not.
    (with_change("config.max_num_seqs", 16.0), "config.max_num_seqs", "expected an integer, got 16.0", False),
    (with_change("config.method", 3), "config.method", "expected a string or null", True),
    (with_change("config.num_gpus", 1), "config.num_gpus", "unknown key", True),
    (with_change("ops.0.prompt_len", True), "ops[0].prompt_len", "expected an integer, got true", True),
    (with_change("ops.0.prompt_len", "10"), "ops[0].prompt_len", 'expected an integer, got "10"', True),
    (with_change("ops.0.prompt_len", 0), "ops[0].prompt_len", "must be >= 1", True),
    (with_change("ops.0.max_tokens", DELETE), "ops[0].max_tokens", "missing key", True),
    (with_change("ops.0.bogus", 1), "ops[0].bogus", "unknown key", True),
    (with_change("ops.0.op", "insert"), "ops[0].op", "expected one of", True),
    (with_change("ops.0.op", DELETE), "ops[0].op", "missing key", True),
    (with_change("ops.0", 7), "ops[0]", "expected an object, got 7", True),
    (with_change("ops.1.prefix_group", DELETE), "ops[1].prefix_group", "needed with prefix_len", True),
    (with_change("ops.2.accepted.0", -1), 'ops[2].accepted["0"]', "must be >= 0", True),
    (with_change("ops.2.accepted.0", False), 'ops[2].accepted["0"]', "expected an integer, got false", True),
    (with_change("expect.0.step", DELETE), "expect[0]", "expected one of the keys", True),
    (with_change("expect.1", {"step": 1}), "expect[1]", "needs at least one of the keys", True),
    (with_change("expect.1", {"stepp": 1}), "expect[1]", "expected one of the keys", True),
    (with_change("expect.2", {"violation": "input-rows-cap", "step": 1}), "expect[2].step", "unknown key", True),
    (with_change("expect.2", {"no_violation": 1}), "expect[2].no_violation", "expected true, got 1", True),
    # what the schema cannot say
    (with_change("ops.1.id", "0"), "ops[1].id", "already added by ops[0]", False),
    (with_change("ops.4.id", "9"), "ops[4].id", "unknown request id '9'", False),
    (with_change("ops.2.accepted", {"1": 1, "7": 1}), 'ops[2].accepted["7"]', "unknown request id '7'", False),
    (with_change("ops.0", {"op": "abort", "id": "0"}), "ops[0].id", "unknown request id '0' (no earlier add)", False),
    (with_change("expect.2.violation", "rows-cap"), "expect[2].violation", "unknown invariant 'rows-cap'", False),
    (with_change("expect.0.step", 2), "expect[0].step", "the trace has 2 step ops", False),
    (with_change("expect.0.preempted", ["x"]), "expect[0].preempted[0]", "unknown request id 'x'", False),
    (with_change("expect.1", {"no_violation": True}), "expect[1]", "contradicts the violation expected", False),
    (with_change("expect.1", {"config_rejected": "B"}), "expect[1]", "must be the only expectation", False),
]


def write(tmp_path: Path, text: str | bytes, name: str = "t.json") -> Path:
    path = tmp_path / name
    path.write_bytes(text if isinstance(text, bytes) else text.encode("utf-8"))
    return path


def assert_one_line(err: TraceError, source: str, path: str, words: str) -> None:
    message = str(err)
    assert "\n" not in message
    assert message.startswith(f"{source}: ")
    assert f": {path}: " in message if path else True
    assert words in message, message


def test_valid_trace_parses_into_typed_dataclasses() -> None:
    trace = parse_trace(VALID, "v.json")
    assert trace.policy == "vllm-adaptive" and trace.source == "v.json"
    assert trace.ops[0] == AddOp("0", 10, 16)
    assert trace.ops[1] == AddOp("1", 10, 16, priority=2, prefix_group="sys", prefix_len=8)
    assert trace.ops[2] == StepOp({"0": 2}) and trace.ops[3] == StepOp() and trace.ops[4] == AbortOp("1")
    assert trace.expect[0] == StepExpectation(0, num_scheduled_tokens={"0": 10, "1": 4}, preempted=())
    assert trace.expect[2] == ViolationExpectation("input-rows-cap")
    assert trace.num_steps == 2


def test_round_trip_dump_and_load(tmp_path: Path) -> None:
    trace = parse_trace(VALID)
    assert parse_trace(dump_trace(trace)) == trace
    path = tmp_path / "out.json"
    write_trace(trace, path)
    assert load_trace(path) == trace
    assert json.loads(path.read_text()) == dump_trace(trace)


def test_dump_leaves_out_defaults_but_keeps_tags() -> None:
    trace = Trace("p", {}, (AddOp("a", 1, 1), StepOp()), (NoViolationExpectation(True),))
    assert dump_trace(trace) == {
        "format": FORMAT, "policy": "p", "config": {},
        "ops": [{"op": "add", "id": "a", "prompt_len": 1, "max_tokens": 1}, {"op": "step"}],
        "expect": [{"no_violation": True}],
    }


def test_write_refuses_to_overwrite(tmp_path: Path) -> None:
    path = write(tmp_path, "keep me")
    with pytest.raises(FileExistsError):
        write_trace(parse_trace(VALID), path)
    assert path.read_text() == "keep me"


def test_format_puts_one_op_per_line() -> None:
    text = format_trace(parse_trace(VALID))
    assert '    {"op": "step", "accepted": {"0": 2}},\n' in text
    assert json.loads(text) == dump_trace(parse_trace(VALID))


@pytest.mark.parametrize("doc, path, words, structural", REJECTIONS, ids=[r[2] for r in REJECTIONS])
def test_rejections_name_file_path_and_problem(tmp_path: Path, doc: object, path: str, words: str,
                                               structural: bool) -> None:
    file = write(tmp_path, json.dumps(doc))
    with pytest.raises(TraceError) as info:
        load_trace(file)
    assert_one_line(info.value, str(file), path, words)
    assert isinstance(info.value, ValueError)


@pytest.mark.parametrize("text, words", [
    ('{"format": "tokenbudget.trace/1",\n  "policy": }', "invalid JSON at line 2 column 13"),
    ("", "invalid JSON at line 1 column 1"),
    ('{"policy": "a", "policy": "b"}', "duplicate key 'policy'"),
    (b'{"policy": "\xff"}', "not UTF-8"),
])
def test_unreadable_json_is_one_line(tmp_path: Path, text: str | bytes, words: str) -> None:
    file = write(tmp_path, text)
    with pytest.raises(TraceError) as info:
        load_trace(file)
    assert_one_line(info.value, str(file), "", words)


def test_a_file_that_cannot_be_read_is_a_trace_error_naming_it(tmp_path: Path) -> None:
    with pytest.raises(TraceError, match=r"nope\.json: cannot read it \(No such file or directory\)"):
        load_trace(tmp_path / "nope.json")


def test_programmatic_traces_are_checked_too() -> None:
    with pytest.raises(TraceError, match=r"<trace>: ops\[0\]\.id: unknown request id"):
        Trace("p", {}, (AbortOp("x"),))


def _json_types(annotation: str) -> list[str]:
    names = {"int": "integer", "str": "string", "bool": "boolean", "None": "null"}
    return [names[part.strip()] for part in annotation.split("|")]


def test_schema_config_matches_budget_config() -> None:
    schema_props = SCHEMA.defs["config"]["properties"]
    assert list(schema_props) == [f.name for f in fields(BudgetConfig)]
    for f in fields(BudgetConfig):
        declared = schema_props[f.name]["type"]
        assert ([declared] if isinstance(declared, str) else declared) == _json_types(str(f.type)), f.name


def test_schema_definitions_match_the_dataclasses() -> None:
    for name, cls in ITEM_CLASSES.items():
        keys = [k for k in SCHEMA.defs[name]["properties"] if k != "op"]
        assert keys == [f.name for f in fields(cls)], name
        required = [k for k in SCHEMA.defs[name].get("required", ()) if k != "op"]
        assert required == [f.name for f in fields(cls) if f.default is MISSING and f.default_factory is MISSING]


def test_format_constant_comes_from_the_schema() -> None:
    assert FORMAT == SCHEMA.root["properties"]["format"]["const"] == "tokenbudget.trace/1"


def test_real_json_schema_validator_agrees() -> None:
    """The schema file is standard draft-07: a stock validator accepts the corpus and rejects
    what the loader rejects on structure."""
    jsonschema = pytest.importorskip("jsonschema")
    validator = jsonschema.Draft7Validator(SCHEMA.root)
    jsonschema.Draft7Validator.check_schema(SCHEMA.root)
    for path in corpus_paths():
        validator.validate(json.loads(path.read_text()))
    validator.validate(VALID)
    for doc, _, words, structural in REJECTIONS:
        assert validator.is_valid(doc) is not structural, words


# -- the quick paths agree with the walks that name problems ----------------------------
def walk_accepts(doc: object) -> bool:
    """The schema's message-giving walk (jsonschema) passes doc."""
    return bool(SCHEMA.walker.is_valid(doc))


def values_walk_accepts(doc: object) -> bool:
    """``_check_values``'s path-naming walk passes doc (its quick walk switched off)."""
    with mock.patch.object(trace_module, "_plain_values", lambda value, depth: False):
        try:
            trace_module._check_values(doc, "t")
        except TraceError:
            return False
    return True


def nested(depth: int, leaf: object = 1, as_list: bool = False) -> object:
    """leaf at ``depth`` levels down, under dicts (or lists)."""
    value = leaf
    for _ in range(depth):
        value = [value] if as_list else {"k": value}
    return value


JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.floats(allow_nan=False) | st.text(max_size=4)
    | st.sampled_from([0, -1, 1, 2**63 - 1, 2**63, -(2**63), "\ud800", "x\udfff", nested(14), nested(17)])
    | st.integers(-10, 10),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3) | st.just("\ud800"), inner,
                                                                  max_size=3),
    max_leaves=6,
)
PATHS = ["format", "policy", "description", "config", "config.max_num_seqs", "config.method", "config.extra",
         "ops", "ops.0", "ops.0.op", "ops.0.id", "ops.0.prompt_len", "ops.1.prefix_len", "ops.1.prefix_group",
         "ops.2", "ops.2.accepted", "ops.2.accepted.0", "ops.2.accepted.1", "ops.3.op", "ops.4.id", "ops.9",
         "expect", "expect.0", "expect.0.step", "expect.0.preempted", "expect.1.scheduled_draft_tokens",
         "expect.2.violation", "expect.2.step", "found_by", "extra"]


def mutated(path: str, value: object) -> dict:
    doc = copy.deepcopy(VALID)
    *parents, last = path.split(".")
    node: object = doc
    for key in parents:
        node = node[int(key)] if isinstance(node, list) else node[key]  # type: ignore[index]
    if isinstance(node, list):
        index = int(last)
        if index < len(node):
            node[index] = value
        else:
            node.append(value)
    else:
        node[last] = value  # type: ignore[index]
    return doc


def test_the_quick_paths_agree_on_the_table_of_rejections() -> None:
    edges = [nested(depth, leaf, as_list) for depth in range(MAX_DEPTH - 1, MAX_DEPTH + 2)
             for leaf in ({}, [], 1, "x") for as_list in (False, True)]
    docs = [VALID, *[doc for doc, *_ in REJECTIONS], *[json.loads(p.read_text()) for p in corpus_paths()], *edges]
    for doc in docs:
        assert SCHEMA.accepts(doc) == walk_accepts(doc), doc
        assert trace_module._plain_values(doc, 0) == values_walk_accepts(doc), doc
    assert not SCHEMA.accepts(REJECTIONS[0][0]) and SCHEMA.accepts(VALID)


@settings(max_examples=300)
@given(path=st.sampled_from(PATHS), value=JSON_VALUES)
def test_the_quick_paths_accept_exactly_what_the_walks_accept(path: str, value: object) -> None:
    """``Schema.accepts`` and ``_plain_values`` decide, in the loader, whether the slow walks
    run at all: a yes where a walk says no would let a bad trace in."""
    doc = mutated(path, value)
    assert SCHEMA.accepts(doc) == walk_accepts(doc)
    assert trace_module._plain_values(doc, 0) == values_walk_accepts(doc)
