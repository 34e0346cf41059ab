"""The layering of the code base (ARCHITECTURE.md): every import points down, no circle.

Layers, bottom to top: spec/ -> model/ -> harness/, fuzz/, proofs/, kernels/ (siblings:
none imports another) -> tokenbudget/ (commands and rendering). Every import counts,
including those inside functions and under TYPE_CHECKING: a lazy import that points up
is still a dependency that points up.
"""
from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
FOLDERS = {"spec": 0, "model": 1, "harness": 2, "fuzz": 2, "proofs": 2, "kernels": 2, "whatif": 2, "tokenbudget": 3}


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _modules() -> dict[str, Path]:
    return {_module_name(path): path for path in sorted((ROOT / "tokenbudget").rglob("*.py"))
            if "corpus" not in path.parts}


def _folder(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 and parts[1] in FOLDERS else "tokenbudget"


def _imports(module: str, path: Path, known: dict[str, Path]) -> set[str]:
    """The tokenbudget modules this module imports (a package's ``__init__`` counts as the package)."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            # ``from pkg import submodule`` depends on the submodule; ``from pkg import name`` on pkg
            subs = [f"{target}.{a.name}" for a in node.names]
            names = [n for n in subs if n in known] + ([target] if any(n not in known for n in subs) else [])
        else:
            continue
        for name in names:
            while name and name not in known:
                name = name.rpartition(".")[0]
            if name and name != module:
                out.add(name)
    return out


def _graph() -> dict[str, set[str]]:
    known = _modules()
    return {m: _imports(m, p, known) for m, p in known.items()}


def test_every_import_points_down() -> None:
    upward = []
    for module, deps in _graph().items():
        mine = _folder(module)
        for dep in deps:
            theirs = _folder(dep)
            if FOLDERS[theirs] > FOLDERS[mine] or (FOLDERS[theirs] == FOLDERS[mine] and theirs != mine):
                upward.append(f"{module} imports {dep} ({mine}/ may import only the layers below it)")
    assert not upward, "\n".join(sorted(upward))


def test_no_import_circle() -> None:
    graph = _graph()
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    circles: list[list[str]] = []

    def visit(v: str) -> None:  # Tarjan's strongly connected components
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                circles.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    assert not circles, "import circles:\n" + "\n".join(" <-> ".join(c) for c in circles)


def test_the_graph_sees_the_code_base() -> None:
    graph = _graph()
    assert "tokenbudget.model.loop" in graph and "tokenbudget.spec.records" in graph["tokenbudget.model.loop"]
    assert all(_folder(m) in FOLDERS for m in graph)


def test_fuzz_runs_without_z3_or_the_prover(tmp_path: Path) -> None:
    """``fuzz`` judges its violations by ``tokenbudget.verdict`` and reads the built-ins'
    record as data: importing the command and a tiny fuzz of a known-bad built-in (a
    violation judged known by its record) load neither z3 nor any module of the prover."""
    script = (
        "import sys, io, contextlib\n"
        "from tokenbudget.fuzz_cmd import run\n"
        "from tokenbudget.cli import main\n"
        "with contextlib.redirect_stdout(io.StringIO()) as out:\n"
        f"    code = main(['fuzz', '--policy', 'fastdeploy-v0', '--examples', '5', '--workers', '1', "
        f"'--database', 'none', '--corpus', {str(tmp_path)!r}, '--quiet'])\n"
        "loaded = sorted(m for m in sys.modules if m == 'z3' or m.startswith(('z3.', 'tokenbudget.proofs')))\n"
        "print(code, 'verdict:' in out.getvalue(), loaded)\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    code, rendered, loaded = done.stdout.strip().split(" ", 2)
    assert rendered == "True" and code in ("0", "1") and loaded == "[]", done.stdout
