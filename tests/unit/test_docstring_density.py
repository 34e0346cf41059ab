"""Docstrings state contracts: the library's prose stays short beside its code (ARCHITECTURE.md).

Prose lines are docstring lines and lines holding only a comment; a code line holds code (a
comment beside it, such as an engine rule's citation, is part of it)."""
from __future__ import annotations

import ast
import io
import tokenize
from pathlib import Path

import pytest

LIBRARY = Path(__file__).resolve().parents[2] / "tokenbudget"
MAX_PROSE_PER_CODE_LINE = 0.25
MAX_DOCSTRING_LINES = 15
NOT_CODE = {tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT, tokenize.ENDMARKER, tokenize.COMMENT}


def docstrings(tree: ast.Module) -> list[ast.Expr]:
    """The docstring statements of a module, its classes and its functions."""
    owners = [tree, *(n for n in ast.walk(tree) if isinstance(n, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)))]
    return [owner.body[0] for owner in owners if owner.body and isinstance(owner.body[0], ast.Expr)
            and isinstance(owner.body[0].value, ast.Constant) and isinstance(owner.body[0].value.value, str)]


def line_counts(path: Path, root: Path = LIBRARY) -> tuple[int, int, list[tuple[int, str]]]:
    """Prose lines, code lines and each docstring's length with its place, of one file."""
    text = path.read_text(encoding="utf-8")
    found = docstrings(ast.parse(text))
    prose = {line for doc in found for line in range(doc.lineno, (doc.end_lineno or doc.lineno) + 1)}
    code: set[int] = set()
    comments: set[int] = set()
    for token in tokenize.generate_tokens(io.StringIO(text).readline):
        if token.type == tokenize.COMMENT:
            comments.add(token.start[0])
        elif token.type not in NOT_CODE:
            code.update(range(token.start[0], token.end[0] + 1))
    code -= prose
    lengths = [((doc.end_lineno or doc.lineno) - doc.lineno + 1, f"{path.relative_to(root)}:{doc.lineno}")
               for doc in found]
    return len(prose | (comments - code)), len(code), lengths


@pytest.mark.parametrize("folder", ["model", "harness"])
def test_prose_per_code_line_stays_low(folder: str) -> None:
    counts = [line_counts(path) for path in sorted((LIBRARY / folder).rglob("*.py"))]
    prose, code = sum(c[0] for c in counts), sum(c[1] for c in counts)
    assert code and prose / code <= MAX_PROSE_PER_CODE_LINE, f"{folder}: {prose} prose lines, {code} code lines"


def test_no_docstring_is_longer_than_the_most() -> None:
    """The library's own modules; the corpus's exported vLLM tests are written by ``harness/vllm/export.py``."""
    written = [path for path in sorted(LIBRARY.rglob("*.py")) if "corpus" not in path.relative_to(LIBRARY).parts]
    lengths = [length for path in written for length in line_counts(path)[2]]
    too_long = sorted((n, where) for n, where in lengths if n > MAX_DOCSTRING_LINES)
    assert not too_long, f"docstrings over {MAX_DOCSTRING_LINES} lines: {too_long}"


def test_the_measure_counts_a_docstring_a_comment_and_code(tmp_path: Path) -> None:
    sample = tmp_path / "sample.py"
    sample.write_text('"""Doc\n\nmore."""\n# a comment\nx = 1  # beside code\n\n\ndef f():\n    """One."""\n    return x\n')
    assert line_counts(sample, tmp_path) == (5, 3, [(3, "sample.py:1"), (1, "sample.py:9")])
