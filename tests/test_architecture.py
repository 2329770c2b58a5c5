"""The layers of docs/architecture.md hold, and no amplint module imports itself in a circle.

Two independent checks: import-linter's contracts in pyproject.toml (layers, and
no cycles between the modules of any package), and an own import graph built
with `ast` from every import statement, the ones inside functions included, and
the lazy exports of the `amplint` and `amplint.model` facades. Imports under
`if TYPE_CHECKING:` never run and are left out. import-linter cannot see
`amplint.rules` (it is shipped from rules/), so the own graph covers it and a
test pins what rules may import.
"""
from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path
from typing import Dict, Iterator, List, Optional, Set, Tuple

ROOT = Path(__file__).resolve().parent.parent

Graph = Dict[str, Set[str]]


# ------------------------------------------------------------------ the own graph


def _modules(folders: List[Tuple[Path, str]]) -> Dict[str, Path]:
    """{dotted module name: file} for every .py file under each (folder, package name)."""
    out: Dict[str, Path] = {}
    for folder, package in folders:
        for path in sorted(folder.rglob("*.py")):
            parts = list(path.relative_to(folder).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            out[".".join([package, *parts])] = path
    return out


def _runtime_imports(tree: ast.Module) -> Iterator[ast.AST]:
    """Every import statement that can run: at any depth, but not under `if TYPE_CHECKING:`."""
    stack: List[ast.AST] = [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            stack.extend(node.orelse)
            continue
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            yield node
        stack.extend(ast.iter_child_nodes(node))


def _lazy_exports(tree: ast.Module) -> Iterator[str]:
    """The relative module names of a PEP 562 facade's `_EXPORTS = {name: ".module"}`."""
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "_EXPORTS" for t in node.targets):
            for value in ast.literal_eval(node.value).values():
                yield value


def _absolute(module: str, is_package: bool, level: int, name: Optional[str]) -> str:
    base = module.split(".")
    if not is_package:
        base = base[:-1]
    if level > 1:
        base = base[: len(base) - (level - 1)]
    return ".".join(base + ([name] if name else []))


def import_graph(modules: Dict[str, Path]) -> Graph:
    """module -> the modules of `modules` it imports (an import of `pkg.name` that is a
    submodule points at the submodule; anything else at the package)."""
    graph: Graph = {m: set() for m in modules}

    def known(target: str) -> Optional[str]:
        while target and target not in modules:
            target = target.rpartition(".")[0]
        return target or None

    for module, path in modules.items():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        is_package = path.name == "__init__.py"
        targets: List[str] = []
        for node in _runtime_imports(tree):
            if isinstance(node, ast.Import):
                targets += [a.name for a in node.names]
                continue
            base = _absolute(module, is_package, node.level, node.module) if node.level else (node.module or "")
            targets += [f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base for a in node.names]
        for relative in _lazy_exports(tree):
            level = len(relative) - len(relative.lstrip("."))
            targets.append(_absolute(module, is_package, level, relative.lstrip(".")))
        for target in targets:
            found = known(target)
            if found is not None and found != module:
                graph[module].add(found)
    return graph


def find_cycle(graph: Graph) -> Optional[List[str]]:
    """One cycle of `graph` as [a, b, ..., a], or None."""
    state: Dict[str, int] = {}  # 1: on the current path, 2: done
    path: List[str] = []

    def visit(node: str) -> Optional[List[str]]:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return path[path.index(nxt):] + [nxt]
            if nxt not in state:
                found = visit(nxt)
                if found:
                    return found
        path.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state:
            found = visit(node)
            if found:
                return found
    return None


def amplint_graph() -> Graph:
    return import_graph(_modules([(ROOT / "amplint", "amplint"), (ROOT / "rules", "amplint.rules")]))


def test_no_import_cycle_between_amplint_modules_lazy_imports_included():
    graph = amplint_graph()
    assert len(graph) > 60 and "amplint.rules.amp101_clip_grad_before_unscale" in graph
    assert find_cycle(graph) is None, " -> ".join(find_cycle(graph) or [])


def test_the_graph_sees_imports_inside_functions_and_skips_type_checking(tmp_path):
    """The check above could not pass by missing lazy imports: here one makes a cycle."""
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from . import b\n")
    (pkg / "b.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .a import x\n")
    graph = import_graph(_modules([(pkg, "pkg")]))
    assert graph["pkg.b"] == set() and find_cycle(graph) is None
    (pkg / "b.py").write_text("def f():\n    if True:\n        from .a import x\n")
    graph = import_graph(_modules([(pkg, "pkg")]))
    assert graph["pkg.b"] == {"pkg.a"}
    assert find_cycle(graph) == ["pkg.a", "pkg.b", "pkg.a"]
    (pkg / "__init__.py").write_text('_EXPORTS = {"x": ".a"}\n')
    (pkg / "b.py").write_text("import pkg\n")
    assert find_cycle(import_graph(_modules([(pkg, "pkg")]))) == ["pkg", "pkg.a", "pkg.b", "pkg"]


def test_rules_import_only_the_model():
    """Rules see amplint only through `amplint.model` (or the public `amplint` facade)."""
    seen = 0
    for path in sorted((ROOT / "rules").glob("*.py")):
        for node in _runtime_imports(ast.parse(path.read_text(encoding="utf-8"))):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]
            for name in names:
                if name.split(".")[0] == "amplint" or (isinstance(node, ast.ImportFrom) and node.level):
                    seen += 1
                    assert name in ("amplint", "amplint.model") and not getattr(node, "level", 0), (path.name, name)
    assert seen >= 25
    graph = amplint_graph()
    assert not any(t.startswith("amplint.rules") for m, ts in graph.items() if m.startswith("amplint.model") for t in ts)


def test_model_facade_exports_resolve():
    """Every export resolves, and none is shadowed by a submodule of the same name (once
    `amplint.model.x` is imported, the package's attribute `x` is that module)."""
    import pkgutil

    import amplint.model as model

    assert not set(model.__all__) & {m.name for m in pkgutil.iter_modules(model.__path__)}
    for name in model.__all__:
        assert getattr(model, name) is not None, name


# ------------------------------------------------------------------ import-linter


def test_import_linter_contracts_hold():
    """The layers contract and the no-cycle contract in pyproject.toml (run as CI runs them)."""
    code = (
        "import sys\n"
        "from importlinter.cli import lint_imports\n"
        "sys.exit(lint_imports(config_filename='pyproject.toml', no_cache=True, no_logo=True))\n"
    )
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    assert "2 kept, 0 broken" in proc.stdout


def test_python_dash_m_amplint_runs_the_console_script(tmp_path):
    from amplint import __version__

    proc = subprocess.run([sys.executable, "-m", "amplint", "--version"], capture_output=True, text=True, cwd=tmp_path)
    assert (proc.returncode, proc.stdout) == (0, f"amplint {__version__}\n")
    (tmp_path / "t.py").write_text("import torch\nwith torch.cuda.amp.autocast():\n    pass\n")
    proc = subprocess.run(
        [sys.executable, "-m", "amplint", "t.py", "--isolated", "--no-cache", "--output-format", "concise"],
        capture_output=True, text=True, cwd=tmp_path,
    )
    assert proc.returncode == 1 and "t.py:2:6: AMP001" in proc.stdout, proc.stdout + proc.stderr
