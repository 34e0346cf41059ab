"""Traces: the file format every counterexample is written in (``tokenbudget.trace/1``).

The structure is defined once, by ``trace.schema.json`` beside this file: ``parse_trace``
validates against it, and the dataclasses below carry the schema's key names as field
names. A Trace then checks what a schema cannot: add ids are unique, steps and aborts
name requests added earlier, expectations name known invariants, existing steps and
added requests. Policy names and config values are not judged here; a replay does that.
Every rejection is a TraceError whose message is one line: file, key path, problem.
"""
from __future__ import annotations

import json
import os
import re
from dataclasses import MISSING, Field, dataclass, field, fields
from importlib import resources
from typing import Any, Literal, Mapping, NoReturn, Sequence, Union

from .invariants import INVARIANTS
from .schema import Schema
from .user_paths import PathRefused, readable_file

SCHEMA = Schema(json.loads(resources.files(__package__).joinpath("trace.schema.json").read_text("utf-8")))
FORMAT: str = SCHEMA.root["properties"]["format"]["const"]
KeyPath = Sequence["str | int"]
_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")


def format_path(path: KeyPath) -> str:
    """``ops[3].prompt_len``; keys that are not identifiers are quoted: ``accepted["7"]``."""
    return "".join(f"[{seg}]" if isinstance(seg, int) else f".{seg}" if _IDENTIFIER.match(seg)
                   else f"[{json.dumps(seg)}]" for seg in path).lstrip(".")


class TraceError(ValueError):
    """A trace that cannot be used: ``str()`` is one line naming the file, the key path and the problem."""

    def __init__(self, source: str, path: KeyPath, problem: str) -> None:
        where = format_path(path)
        super().__init__(f"{source}: {where}: {problem}" if where else f"{source}: {problem}")
        self.source = source
        self.path = tuple(path)
        self.problem = problem


# -- operations ---------------------------------------------------------------------
@dataclass(frozen=True)
class AddOp:
    """Queue a request; requests of one prefix_group share their first prefix_len prompt tokens."""

    id: str
    prompt_len: int
    max_tokens: int
    priority: int = 0
    prefix_group: str | None = None
    prefix_len: int = 0


@dataclass(frozen=True)
class StepOp:
    """Schedule once, then apply the output with ``accepted[id]`` drafts accepted."""

    accepted: Mapping[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class AbortOp:
    id: str


Op = Union[AddOp, StepOp, AbortOp]


# -- expectations -------------------------------------------------------------------
@dataclass(frozen=True)
class StepExpectation:
    """What step ``step`` (0-based, counting step ops) scheduled; None fields are not checked.

    Requests left out of a map are expected to have 0; ``preempted`` is in preemption order;
    ``kv_blocks_in_use`` the KV blocks not free after the pass (the record's).
    """

    step: int
    num_scheduled_tokens: Mapping[str, int] | None = None
    scheduled_draft_tokens: Mapping[str, int] | None = None
    preempted: tuple[str, ...] | None = None
    kv_blocks_in_use: int | None = None


@dataclass(frozen=True)
class ViolationExpectation:
    """The invariant with this id is violated in some step of the run."""

    violation: str


@dataclass(frozen=True)
class NoViolationExpectation:
    """No invariant is violated anywhere in the run."""

    no_violation: Literal[True]


@dataclass(frozen=True)
class ConfigRejectedExpectation:
    """The policy refuses the config with a message containing this text."""

    config_rejected: str


Expectation = Union[StepExpectation, ViolationExpectation, NoViolationExpectation, ConfigRejectedExpectation]

# The schema definition behind each class; its properties (less the "op" tag) are the fields.
ITEM_CLASSES: Mapping[str, type] = {
    "add_op": AddOp, "step_op": StepOp, "abort_op": AbortOp,
    "step_expectation": StepExpectation, "violation_expectation": ViolationExpectation,
    "no_violation_expectation": NoViolationExpectation, "config_rejected_expectation": ConfigRejectedExpectation,
}
_DEF_OF = {cls: name for name, cls in ITEM_CLASSES.items()}
_FIELD_NAMES = {cls: frozenset(f.name for f in fields(cls)) for cls in ITEM_CLASSES.values()}


# -- the trace ----------------------------------------------------------------------
@dataclass(frozen=True)
class Trace:
    """A config, a budget policy, operations and expectations; ``source`` names where it
    came from (a path, or "<trace>") and is not part of its value.

    Raises TraceError when ids or expectations do not refer to what the trace defines.
    """

    policy: str
    config: Mapping[str, Any]
    ops: tuple[Op, ...]
    expect: tuple[Expectation, ...] = ()
    description: str | None = None
    found_by: str | None = None
    source: str = field(default="<trace>", compare=False)

    def __post_init__(self) -> None:
        _check_references(self)

    @property
    def num_steps(self) -> int:
        return sum(1 for op in self.ops if isinstance(op, StepOp))


def _check_references(trace: Trace) -> None:
    def fail(path: KeyPath, problem: str) -> NoReturn:
        raise TraceError(trace.source, path, problem)

    added: dict[str, int] = {}
    for i, op in enumerate(trace.ops):
        if isinstance(op, AddOp):
            if op.id in added:
                fail(["ops", i, "id"], f"request id {op.id!r} was already added by ops[{added[op.id]}]")
            added[op.id] = i
        elif isinstance(op, AbortOp) and op.id not in added:
            fail(["ops", i, "id"], f"unknown request id {op.id!r} (no earlier add)")
        elif isinstance(op, StepOp):
            for rid in op.accepted:
                if rid not in added:
                    fail(["ops", i, "accepted", rid], f"unknown request id {rid!r} (no earlier add)")
    violation_at = None
    for j, e in enumerate(trace.expect):
        if isinstance(e, ViolationExpectation):
            if e.violation not in INVARIANTS:
                fail(["expect", j, "violation"], f"unknown invariant {e.violation!r}; known: {', '.join(INVARIANTS)}")
            violation_at = j if violation_at is None else violation_at
        elif isinstance(e, StepExpectation):
            if e.step >= trace.num_steps:
                n = trace.num_steps
                fail(["expect", j, "step"], f"step {e.step} does not exist; the trace has {n} step op{'s' * (n != 1)}")
            for key in ("num_scheduled_tokens", "scheduled_draft_tokens", "preempted"):
                for k, rid in enumerate(getattr(e, key) or ()):
                    if rid not in added:
                        sub = k if key == "preempted" else rid
                        fail(["expect", j, key, sub], f"unknown request id {rid!r}")
    for j, e in enumerate(trace.expect):
        if isinstance(e, NoViolationExpectation) and violation_at is not None:
            fail(["expect", j], f"no_violation contradicts the violation expected by expect[{violation_at}]")
        if isinstance(e, ConfigRejectedExpectation) and len(trace.expect) > 1:
            fail(["expect", j], "config_rejected must be the only expectation: a refused config runs no step")


# -- reading ------------------------------------------------------------------------
MAX_TRACE_BYTES = 100_000_000  # a trace file is read whole; 100 MB is some 2 million ops
MAX_DEPTH = 16  # the schema nests 5 levels (trace, ops, op, accepted, count); more is not a trace
MAX_INT = 2**63 - 1  # no count, length or knob of a real deployment comes near it


class _DuplicateKey(Exception):
    pass


class _NotJson(Exception):
    pass


class _HugeInt:
    """An integer literal of ``digits`` digits, too long to be a count; reported with its key path."""

    def __init__(self, digits: int) -> None:
        self.digits = digits


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise _DuplicateKey(key)
        out[key] = value
    return out


def _int(text: str) -> int | _HugeInt:
    return int(text) if len(text) <= 20 else _HugeInt(len(text.lstrip("-")))


def _constant(name: str) -> None:
    raise _NotJson(name)


def load_trace(path: str | os.PathLike[str]) -> Trace:
    """Read and validate a trace file. TraceError when it is not a regular file or cannot be
    read (``user_paths.readable_file``: a FIFO, a device, a /proc file are refused before
    they are opened) and when it is not a valid trace (bad UTF-8, bad JSON with line and
    column, duplicate keys, more than MAX_TRACE_BYTES, nesting deeper than MAX_DEPTH, an
    integer past MAX_INT, ...)."""
    source = os.fspath(path)
    try:
        readable_file(source, "a trace file")
        with open(source, "rb") as f:
            raw = f.read(MAX_TRACE_BYTES + 1)
    except PathRefused as e:
        raise TraceError(source, [], e.problem) from None
    except OSError as e:
        raise TraceError(source, [], f"cannot read it ({e.strerror}); give a trace file") from None
    if len(raw) > MAX_TRACE_BYTES:
        raise TraceError(source, [], f"larger than {MAX_TRACE_BYTES // 1_000_000} MB, the most a trace file may be; "
                                     f"split it or shrink it")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise TraceError(source, [], f"not UTF-8 (byte {e.start})") from None
    try:
        obj = json.loads(text, object_pairs_hook=_no_duplicates, parse_int=_int, parse_constant=_constant)
    except json.JSONDecodeError as e:
        raise TraceError(source, [], f"invalid JSON at line {e.lineno} column {e.colno}: {e.msg}") from None
    except _DuplicateKey as e:
        raise TraceError(source, [], f"duplicate key {e.args[0]!r} in an object") from None
    except _NotJson as e:
        raise TraceError(source, [], f"{e.args[0]} is not a JSON number; write a number") from None
    except RecursionError:
        raise TraceError(source, [], f"nested too deep to read; a trace nests at most {MAX_DEPTH} levels") from None
    return parse_trace(obj, source)


def parse_trace(obj: Any, source: str = "<trace>") -> Trace:
    """A Trace from a decoded JSON value; TraceError names the first problem."""
    _check_values(obj, source)
    problem = SCHEMA.problem(obj)
    if problem is not None:
        raise TraceError(source, *problem)
    return Trace(
        policy=obj["policy"],
        config=dict(obj["config"]),
        ops=tuple(_build(SCHEMA.defs["op"], item) for item in obj["ops"]),
        expect=tuple(_build(SCHEMA.defs["expectation"], item) for item in obj.get("expect", ())),
        description=obj.get("description"),
        found_by=obj.get("found_by"),
        source=source,
    )


def _check_values(obj: Any, source: str) -> None:
    """What the schema cannot say, checked before it looks: nesting at most MAX_DEPTH
    levels, integers within MAX_INT, strings (keys too) that are Unicode text (no lone
    surrogate). Control characters are valid text; every output escapes them."""
    if _plain_values(obj, 0):
        return
    stack: list[tuple[tuple[str | int, ...], Any]] = [((), obj)]
    while stack:
        path, value = stack.pop()
        if len(path) > MAX_DEPTH:
            raise TraceError(source, path[:MAX_DEPTH], f"nested deeper than {MAX_DEPTH} levels; a trace nests at "
                                                       f"most 5 (trace, ops, op, accepted, count)")
        if isinstance(value, dict):
            for key, item in value.items():
                if not isinstance(key, str):
                    raise TraceError(source, path, f"key {key!r} is not a string")
                _check_text(key, path, source)
                stack.append(((*path, key), item))
        elif isinstance(value, (list, tuple)):
            stack.extend(((*path, i), item) for i, item in enumerate(value))
        elif isinstance(value, str):
            _check_text(value, path, source)
        elif isinstance(value, _HugeInt):
            raise TraceError(source, path, f"an integer of {value.digits} digits is out of range (at most "
                                           f"{MAX_INT}); write a smaller number")
        elif isinstance(value, int) and not isinstance(value, bool) and abs(value) > MAX_INT:
            raise TraceError(source, path, f"integer out of range (at most {MAX_INT} in size); write a smaller "
                                           f"number")


def _plain_values(value: Any, depth: int) -> bool:
    """True when ``_check_values`` has nothing to say of value at that depth: a quick walk that
    builds no key paths; on False the walk that names the problem runs."""
    kind = type(value)
    if kind is int:
        return -MAX_INT <= value <= MAX_INT and depth <= MAX_DEPTH
    if kind is str:
        return (value.isascii() or _is_text(value)) and depth <= MAX_DEPTH
    if kind is dict:
        return depth <= MAX_DEPTH and all(
            type(key) is str and (key.isascii() or _is_text(key)) and _plain_values(item, depth + 1)
            for key, item in value.items())
    if kind is list:
        return depth <= MAX_DEPTH and all(_plain_values(item, depth + 1) for item in value)
    return (kind is bool or kind is float or value is None) and depth <= MAX_DEPTH


def _is_text(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _check_text(text: str, path: KeyPath, source: str) -> None:
    if not text.isascii():
        try:
            text.encode("utf-8")
        except UnicodeEncodeError as e:
            raise TraceError(source, path, f"a string holds a lone surrogate (\\u{ord(text[e.start]):04x} at "
                                           f"character {e.start}), which is not Unicode text; remove it") from None


def _build(union: Mapping[str, Any], item: Mapping[str, Any]) -> Any:
    cls = ITEM_CLASSES[SCHEMA.branch(union, item)]  # type: ignore[index]  # validated: a branch matches
    names = _FIELD_NAMES[cls]
    return cls(**{k: tuple(v) if isinstance(v, list) else v for k, v in item.items() if k in names})


# -- writing ------------------------------------------------------------------------
def dump_item(item: Op | Expectation) -> dict[str, Any]:
    """The JSON object of one op or expectation; optional keys at their default are left out."""
    node = SCHEMA.defs[_DEF_OF[type(item)]]
    values = {f.name: (getattr(item, f.name), _default(f)) for f in fields(item)}
    out: dict[str, Any] = {}
    for key, prop in node["properties"].items():
        if key not in values:
            out[key] = prop["const"]  # the op tag
            continue
        value, default = values[key]
        if key in node.get("required", ()) or value != default:
            out[key] = list(value) if isinstance(value, tuple) else dict(value) if isinstance(value, Mapping) else value
    return out


def _default(f: Field[Any]) -> Any:
    if f.default is not MISSING:
        return f.default
    return f.default_factory() if f.default_factory is not MISSING else MISSING


def dump_trace(trace: Trace) -> dict[str, Any]:
    """The JSON document of a trace, keys in schema order; parse_trace(dump_trace(t)) == t."""
    doc: dict[str, Any] = {"format": FORMAT, "policy": trace.policy}
    if trace.description is not None:
        doc["description"] = trace.description
    if trace.found_by is not None:
        doc["found_by"] = trace.found_by
    doc["config"] = dict(trace.config)
    doc["ops"] = [dump_item(op) for op in trace.ops]
    if trace.expect:
        doc["expect"] = [dump_item(e) for e in trace.expect]
    return doc


def format_trace(trace: Trace) -> str:
    """The trace as JSON text with one op or expectation per line."""
    lines = []
    for key, value in dump_trace(trace).items():
        if isinstance(value, list) and value:
            inner = ",\n".join("    " + json.dumps(v, ensure_ascii=False) for v in value)
            lines.append(f"  {json.dumps(key)}: [\n{inner}\n  ]")
        else:
            lines.append(f"  {json.dumps(key)}: {json.dumps(value, ensure_ascii=False)}")
    return "{\n" + ",\n".join(lines) + "\n}\n"


def write_trace(trace: Trace, path: str | os.PathLike[str]) -> None:
    """Write the trace to a new file; FileExistsError if ``path`` exists (never overwrites)."""
    with open(path, "x", encoding="utf-8") as f:
        f.write(format_trace(trace))
