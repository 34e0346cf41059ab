"""A tiny validator for the subset of JSON Schema (draft 2020-12) that trace.schema.json uses.

Keywords: ``type``, ``const``, ``minimum``, ``minLength``, ``properties``, ``required``,
``additionalProperties`` (false or a schema), ``dependentRequired``, ``items``, local
``$ref`` ("#/$defs/NAME"), ``oneOf`` and ``anyOf`` in two restricted shapes, plus the
annotations ``title``, ``description``, ``$comment`` and ``$schema``. A schema using any
other keyword is refused when loaded, so it cannot ask for more than is checked.

``oneOf`` branches are tagged object schemas: a branch's tag is its first required key,
with that key's ``const`` where it has one; an instance is validated against the first
branch whose tag it carries. Tags are disjoint and branches reject unknown keys, so this
agrees with the standard "exactly one branch" rule. ``anyOf`` branches list only
``required`` keys: at least one of them must be present.

Integers are Python ints that are not bools; floats are never integers.
"""
from __future__ import annotations

import json
import re
from typing import Any, Callable, Mapping, Sequence

KeyPath = Sequence["str | int"]

_ANNOTATIONS = frozenset({"title", "description", "$comment", "$schema"})
_KEYWORDS = frozenset({
    "type", "const", "minimum", "minLength", "properties", "required", "additionalProperties",
    "dependentRequired", "items", "$ref", "oneOf", "anyOf", "$defs",
})
_NOUNS = {"object": "an object", "array": "an array", "string": "a string", "integer": "an integer",
          "boolean": "true or false", "null": "null"}
_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
_ANY = object()  # a tag without a const


class SchemaViolation(Exception):
    """An instance breaks the schema at ``path`` (key and index segments)."""

    def __init__(self, path: KeyPath, problem: str) -> None:
        super().__init__(f"{format_path(path)}: {problem}")
        self.path = tuple(path)
        self.problem = problem


def format_path(path: KeyPath) -> str:
    """``ops[3].prompt_len``; keys that are not identifiers are quoted: ``accepted["7"]``."""
    out = ""
    for seg in path:
        if isinstance(seg, int):
            out += f"[{seg}]"
        elif _IDENTIFIER.match(seg):
            out += f".{seg}" if out else seg
        else:
            out += f"[{json.dumps(seg)}]"
    return out


def describe(value: Any) -> str:
    """A short rendering of a JSON value for messages, never longer than one line."""
    if isinstance(value, dict):
        return "an object"
    if isinstance(value, list):
        return "an array"
    text = json.dumps(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _is_type(value: Any, name: str) -> bool:
    if name == "integer":
        return isinstance(value, int) and not isinstance(value, bool)
    if name == "boolean":
        return isinstance(value, bool)
    if name == "null":
        return value is None
    return isinstance(value, {"object": dict, "array": list, "string": str}[name])


class Schema:
    """A loaded schema document; ``validate`` raises SchemaViolation at the first problem."""

    def __init__(self, document: Mapping[str, Any]) -> None:
        """Raises ValueError when the document uses a keyword or shape outside the subset."""
        self.root = document
        self._by_ref = {f"#/$defs/{name}": node for name, node in document.get("$defs", {}).items()}
        self._leaf_checks: dict[int, Any] = {}  # id(node) -> a fast test of a leaf node, or None
        self._tests: dict[int, Callable[[Any], bool]] = {}  # id(node) -> the compiled test of ``accepts``
        self._tags: dict[int, list[tuple[str, Any, str]]] = {}  # id(oneOf node) -> its branches' tags and names
        self._check_subset(document, "#")

    @property
    def defs(self) -> Mapping[str, Mapping[str, Any]]:
        defs: Mapping[str, Mapping[str, Any]] = self.root.get("$defs", {})
        return defs

    def validate(self, instance: Any) -> None:
        if not self.accepts(instance):
            self._validate(instance, self.root, [])

    def accepts(self, instance: Any) -> bool:
        """Whether ``validate`` passes instance: the schema compiled once into plain tests, some
        times faster than ``validate``'s walk, with no messages (``validate`` gives those)."""
        try:
            return bool(self._test(self.root)(instance))
        except Exception:  # a value the tests cannot compare: ``validate`` names it
            return False

    def branch(self, node: Mapping[str, Any], instance: Mapping[str, Any]) -> str | None:
        """The $defs name of the oneOf branch of ``node`` that ``instance`` is tagged for."""
        for key, const, name in self._branch_tags(node):
            if key in instance and (const is _ANY or instance[key] == const):
                return name
        return None

    def _branch_tags(self, node: Mapping[str, Any]) -> list[tuple[str, Any, str]]:
        """Tag key, tag const and $defs name of each oneOf branch of node, worked out once."""
        key = id(node)
        if key not in self._tags:
            self._tags[key] = [(*self._tag(self._resolve(ref)), str(ref["$ref"]).rpartition("/")[2])
                               for ref in node["oneOf"]]
        return self._tags[key]

    # -- loading ----------------------------------------------------------------------
    def _resolve(self, node: Mapping[str, Any]) -> Mapping[str, Any]:
        while "$ref" in node:
            ref = node["$ref"]
            if ref in self._by_ref:
                node = self._by_ref[ref]
                continue
            if not ref.startswith("#/$defs/") or ref[len("#/$defs/"):] not in self.defs:
                raise ValueError(f"unsupported or dangling $ref {ref!r}")
            node = self.defs[ref[len("#/$defs/"):]]
        return node

    def _tag(self, branch: Mapping[str, Any]) -> tuple[str, Any]:
        key = branch["required"][0]
        return key, branch["properties"][key].get("const", _ANY)

    def _check_subset(self, node: Any, where: str) -> None:
        if not isinstance(node, dict):
            raise ValueError(f"{where}: a schema must be an object")
        unknown = set(node) - _KEYWORDS - _ANNOTATIONS
        if unknown:
            raise ValueError(f"{where}: unsupported keywords {sorted(unknown)}")
        children: list[tuple[str, Any]] = []
        for key in ("properties", "$defs"):
            children += [(f"{where}/{key}/{k}", v) for k, v in node.get(key, {}).items()]
        for key in ("items", "additionalProperties"):
            if isinstance(node.get(key), dict):
                children.append((f"{where}/{key}", node[key]))
        if "$ref" in node:
            self._resolve(node)
        if "oneOf" in node:
            branches = [self._resolve(b) for b in node["oneOf"]]
            if not all(b.get("type") == "object" and b.get("required") for b in branches):
                raise ValueError(f"{where}: oneOf branches must be objects with a required tag key")
            tags = [self._tag(b) for b in branches]
            if len(set(map(repr, tags))) != len(tags):
                raise ValueError(f"{where}: oneOf branches share a tag")
        if "anyOf" in node and not all(set(b) == {"required"} for b in node["anyOf"]):
            raise ValueError(f"{where}: anyOf branches may only list required keys")
        for child_where, child in children:
            self._check_subset(child, child_where)

    # -- the compiled test ------------------------------------------------------------
    def _test(self, node: Mapping[str, Any]) -> Callable[[Any], bool]:
        """The test of every keyword of node, as ``_validate`` applies them."""
        key = id(node)
        if key not in self._tests:
            leaf = self._leaf_check(node)
            if leaf is not None:
                self._tests[key] = leaf
                return leaf
            parts: list[Callable[[Any], bool]] = []
            self._tests[key] = lambda value: all(part(value) for part in parts)  # a $ref cycle reads this one
            parts += self._keyword_tests(node)
            if len(parts) == 1:
                self._tests[key] = parts[0]
            elif len(parts) == 2:
                first, second = parts
                self._tests[key] = lambda value: first(value) and second(value)
        return self._tests[key]

    def _keyword_tests(self, node: Mapping[str, Any]) -> list[Callable[[Any], bool]]:
        tests: list[Callable[[Any], bool]] = []
        if "$ref" in node:
            tests.append(self._test(self._resolve(node)))
        if "type" in node:
            types = [node["type"]] if isinstance(node["type"], str) else list(node["type"])
            if types == ["integer"]:
                tests.append(lambda v: isinstance(v, int) and not isinstance(v, bool))
            elif types == ["string"]:
                tests.append(lambda v: isinstance(v, str))
            else:
                tests.append(lambda v: any(_is_type(v, t) for t in types))
        if "const" in node:
            const = node["const"]
            tests.append(lambda v: v == const and type(v) is type(const))
        if "minimum" in node:
            minimum = node["minimum"]
            tests.append(lambda v: not v < minimum)
        if "minLength" in node:
            min_length = node["minLength"]
            tests.append(lambda v: not len(v) < min_length)
        if {"properties", "required", "additionalProperties", "dependentRequired"} & set(node):
            tests.append(self._object_test(node))
        if "items" in node:
            item = self._test(node["items"])
            tests.append(lambda v: not isinstance(v, list) or all(map(item, v)))
        if "oneOf" in node:
            tests.append(self._one_of_test(node))
        if "anyOf" in node:
            choices = [tuple(b["required"]) for b in node["anyOf"]]
            tests.append(lambda v: any(all(k in v for k in keys) for keys in choices))
        return tests

    def _object_test(self, node: Mapping[str, Any]) -> Callable[[Any], bool]:
        properties = {k: self._test(sub) for k, sub in node.get("properties", {}).items()}
        required = tuple(node.get("required", ()))
        extra = node.get("additionalProperties", True)
        extra_test = self._test(extra) if isinstance(extra, dict) else None
        dependent = [(k, tuple(needs)) for k, needs in node.get("dependentRequired", {}).items()]

        def test(v: Any) -> bool:
            if not isinstance(v, dict):
                return True  # the type keyword judges it
            for k, value in v.items():
                sub = properties.get(k)
                if sub is not None:
                    if not sub(value):
                        return False
                elif extra is False or (extra_test is not None and not extra_test(value)):
                    return False
            return (all(k in v for k in required)
                    and all(other in v for k, needs in dependent if k in v for other in needs))
        return test

    def _one_of_test(self, node: Mapping[str, Any]) -> Callable[[Any], bool]:
        tests = {name: self._test(self.defs[name]) for _, _, name in self._branch_tags(node)}

        def test(v: Any) -> bool:
            if not isinstance(v, dict):
                return False
            name = self.branch(node, v)
            return name is not None and tests[name](v)
        return test

    # -- validation -------------------------------------------------------------------
    def _leaf_check(self, node: Mapping[str, Any]) -> Any:
        """For a node that only asks a type (and a minimum), a fast test that passes exactly
        the values ``_validate`` accepts; None for any other node."""
        key = id(node)
        if key not in self._leaf_checks:
            resolved = self._resolve(node)
            check = None
            if set(resolved) - _ANNOTATIONS <= {"type", "minimum"} and resolved.get("type") in ("integer", "string"):
                kind, minimum = resolved["type"], resolved.get("minimum")
                if kind == "string" and minimum is None:
                    check = lambda v: type(v) is str  # noqa: E731
                elif kind == "integer":
                    low = minimum if minimum is not None else float("-inf")
                    check = lambda v: type(v) is int and v >= low  # noqa: E731
            self._leaf_checks[key] = check
        return self._leaf_checks[key]

    def _validate(self, value: Any, node: Mapping[str, Any], path: list[str | int]) -> None:
        if "$ref" in node:
            self._validate(value, self._resolve(node), path)
        if "type" in node:
            types = [node["type"]] if isinstance(node["type"], str) else node["type"]
            if not any(_is_type(value, t) for t in types):
                expected = " or ".join(_NOUNS[t] for t in types)
                raise SchemaViolation(path, f"expected {expected}, got {describe(value)}")
        if "const" in node and not (value == node["const"] and type(value) is type(node["const"])):
            raise SchemaViolation(path, f"expected {describe(node['const'])}, got {describe(value)}")
        if "minimum" in node and value < node["minimum"]:
            raise SchemaViolation(path, f"must be >= {node['minimum']}, got {value}")
        if "minLength" in node and len(value) < node["minLength"]:
            raise SchemaViolation(path, "must not be empty" if node["minLength"] == 1
                                  else f"must have at least {node['minLength']} characters")
        if isinstance(value, dict):
            self._validate_object(value, node, path)
        if isinstance(value, list) and "items" in node:
            for index, item in enumerate(value):
                self._validate(item, node["items"], [*path, index])
        if "oneOf" in node:
            self._validate_one_of(value, node, path)
        if "anyOf" in node and not any(all(k in value for k in b["required"]) for b in node["anyOf"]):
            keys = ", ".join(k for b in node["anyOf"] for k in b["required"])
            raise SchemaViolation(path, f"needs at least one of the keys {keys}")

    def _validate_object(self, value: dict[str, Any], node: Mapping[str, Any], path: list[str | int]) -> None:
        properties = node.get("properties", {})
        required = node.get("required", [])
        for key, sub in properties.items():
            if key in value:
                check = self._leaf_check(sub)
                if check is None or not check(value[key]):
                    self._validate(value[key], sub, [*path, key])
            elif key in required:
                raise SchemaViolation([*path, key], "missing key")
        for key in required:
            if key not in value:
                raise SchemaViolation([*path, key], "missing key")
        extra = node.get("additionalProperties", True)
        for key in value:
            if key in properties:
                continue
            if extra is False:
                known = ", ".join(properties)
                raise SchemaViolation([*path, key], f"unknown key; known keys: {known}")
            if isinstance(extra, dict):
                check = self._leaf_check(extra)
                if check is None or not check(value[key]):
                    self._validate(value[key], extra, [*path, key])
        for key, needs in node.get("dependentRequired", {}).items():
            for other in needs:
                if key in value and other not in value:
                    raise SchemaViolation([*path, other], f"missing key (needed with {key})")

    def _validate_one_of(self, value: Any, node: Mapping[str, Any], path: list[str | int]) -> None:
        if not isinstance(value, dict):
            raise SchemaViolation(path, f"expected an object, got {describe(value)}")
        name = self.branch(node, value)
        if name is not None:
            self._validate(value, self.defs[name], path)
            return
        tags = [self._tag(self._resolve(b)) for b in node["oneOf"]]
        keys = [key for key, _ in tags]
        if len(set(keys)) == 1:
            options = ", ".join(describe(const) for _, const in tags)
            if keys[0] not in value:
                raise SchemaViolation([*path, keys[0]], f"missing key (one of {options})")
            raise SchemaViolation([*path, keys[0]], f"expected one of {options}, got {describe(value[keys[0]])}")
        raise SchemaViolation(path, f"expected one of the keys {', '.join(keys)}")
