"""No command names a real engine: their choices, help and error lines come from
``harness.registry``. Code is checked (identifiers, imports, strings), not prose (comments
and docstrings); a built-in policy's name is a policy, and ``model`` and ``runner`` are
targets, not engines."""
from __future__ import annotations

import ast
import io
import re
import tokenize
from pathlib import Path

from tokenbudget.model import builtin_policies

PACKAGE = Path(__file__).resolve().parents[2] / "tokenbudget"
ENGINE_NAME = re.compile(r"(?<![a-z0-9])(vllm|sglang|fastdeploy|trtllm)(?![a-z0-9])", re.IGNORECASE)


def command_modules() -> list[Path]:
    return sorted(PACKAGE.glob("*_cmd.py")) + [PACKAGE / "cli.py", PACKAGE / "check.py"]


def docstring_lines(source: str) -> set[int]:
    """The lines of every module, class and function docstring."""
    lines: set[int] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) \
                    and isinstance(first.value.value, str):
                lines.update(range(first.lineno, (first.end_lineno or first.lineno) + 1))
    return lines


def engine_names_in_code(source: str) -> list[tuple[int, str]]:
    """(line, token) of each identifier or string that names an engine, outside docstrings."""
    prose, policies = docstring_lines(source), {f'"{name}"' for name in builtin_policies()}
    return [(tok.start[0], tok.string) for tok in tokenize.generate_tokens(io.StringIO(source).readline)
            if tok.type in (tokenize.NAME, tokenize.STRING) and tok.start[0] not in prose
            and tok.string not in policies and ENGINE_NAME.search(tok.string)]


def test_the_check_sees_an_engine_in_code_and_not_in_prose() -> None:
    source = ('"""Drives vLLM."""\nfrom .harness.vllm import x  # SGLang too\nHELP = "for --target sglang"\n'
              'POLICY = "vllm-adaptive"\n')
    assert engine_names_in_code(source) == [(2, "vllm"), (3, '"for --target sglang"')]


def test_no_command_names_an_engine() -> None:
    found = {path.name: hits for path in command_modules() if (hits := engine_names_in_code(path.read_text()))}
    assert not found, found
