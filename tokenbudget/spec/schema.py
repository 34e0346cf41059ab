"""The trace schema (draft-07) checked by maintained libraries: fastjsonschema decides, jsonschema names
the first problem of a document refused. The 20k-request trace (bench/bench_schema.py, same machine): 1.5 s
to validate against the hand-written validator's 0.56 s (load_trace 2.7 s against 1.9 s), kept for 300
fewer lines; jsonschema alone takes 51 s, so it walks only a refused document."""
from __future__ import annotations

import contextlib
import json
from typing import Any, Mapping

import fastjsonschema
import jsonschema

_NOUNS = dict(object="an object", array="an array", string="a string", integer="an integer",
              boolean="true or false", null="null")
Problem = tuple[list["str | int"], str]  # the key path (key and index segments) and what is wrong there


class Schema:
    """A schema document; ``problem`` names a document's first problem."""

    def __init__(self, document: Mapping[str, Any]) -> None:
        self.root, self.defs = document, document.get("$defs", {})
        walker = jsonschema.validators.validator_for(document)
        strict = walker.TYPE_CHECKER.redefine("integer", lambda _, v: type(v) is int)  # 16.0 is no integer here
        self.walker = jsonschema.validators.extend(walker, type_checker=strict)(document)
        self.fast = fastjsonschema.compile(dict(document))

    def accepts(self, instance: Any) -> bool:
        """fastjsonschema's yes, for a document without floats (it counts 16.0 as an integer)."""
        with contextlib.suppress(fastjsonschema.JsonSchemaException):
            return self.fast(instance) is not None and not _holds_float(instance)  # it returns what it validated
        return False

    def problem(self, instance: Any) -> Problem | None:
        """The first problem of ``instance``; None when it is valid."""
        return None if self.accepts(instance) else next(map(_problem, self.walker.iter_errors(instance)), None)

    def branch(self, node: Mapping[str, Any], instance: Mapping[str, Any]) -> str | None:
        """The $defs name of the ``then`` that a valid ``instance`` takes in the if/then chain ``node``."""
        while "if" in node:
            key, tag = node["if"]["required"][0], node["if"].get("properties", {})
            if key in instance and instance[key] == tag.get(key, {}).get("const", instance[key]):
                return str(node["then"]["$ref"]).rpartition("/")[2]
            node = node["else"]
        return None


def _problem(error: Any) -> Problem:
    kind, want, got, path = error.validator, error.validator_value, error.instance, list(error.absolute_path)
    known = error.schema.get("properties", {})
    if kind == "required":
        key = next(k for k in want if k not in got)
        options = ", ".join(map(_show, known.get(key, {}).get("enum", ())))
        return [*path, key], f"missing key (one of {options})" if options else "missing key"
    if kind == "additionalProperties":
        return [*path, next(k for k in got if k not in known)], f"unknown key; known keys: {', '.join(known)}"
    if kind == "dependencies":
        key, other = next((k, o) for k, needs in want.items() if k in got for o in needs if o not in got)
        return [*path, other], f"missing key (needed with {key})"
    problem = {
        "type": lambda: " or ".join(_NOUNS[t] for t in ([want] if isinstance(want, str) else want)),
        "const": lambda: _show(want), "enum": lambda: f"one of {', '.join(map(_show, want))}",
        "minimum": lambda: f"must be >= {want}, got {got}",
        "minLength": lambda: "must not be empty" if want == 1 else f"must have at least {want} characters",
        "anyOf": lambda: f"needs at least one of the keys {', '.join(k for b in want for k in b['required'])}",
        "oneOf": lambda: f"expected one of the keys {', '.join(k for b in want for k in b['required'])}",
    }.get(kind, lambda: str(error.message))()
    return path, f"expected {problem}, got {_show(got)}" if kind in ("type", "const", "enum") else problem


def _show(value: Any) -> str:
    text = "an object" if isinstance(value, dict) else "an array" if isinstance(value, list) else json.dumps(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _holds_float(value: Any) -> bool:
    children = value.values() if type(value) is dict else value if type(value) is list else ()
    return type(value) is float or any(map(_holds_float, children))
