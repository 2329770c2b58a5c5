"""The project half of a rule loads without libcst.

A rule's `check_project` reads only the project model (`ast` summaries), so the
engine's cross-file pass must not pay for libcst (about a third of a second to
import, much more on a loaded machine): a run that parses no file (nothing
passes a gate, a warm run, a one-file run after an edit to a file no gate lets
through) imports it nowhere. Rule modules that define `check_project` import at
module level only libcst-free names; what their per-file `check` needs (libcst,
the per-file model) is imported by the functions that run it, and is named at
module level only under `TYPE_CHECKING`, for annotations.
"""
from __future__ import annotations

import ast
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Dict, List, Set

import pytest

from amplint.engine.crossfile import project_rules
from amplint.engine.registry import rule_specs

ROOT = Path(__file__).resolve().parents[1]
PROJECTS = ROOT / "fixtures" / "projects"

#: a backward inside an autocast held in an attribute (AMP202's project half; no fixture has it)
HELD_BACKWARD = '''from functools import partial

import torch


class Trainer:
    def __init__(self, model, optimizer):
        self.model = model
        self.optimizer = optimizer
        self.amp_autocast = partial(torch.autocast, device_type="cuda", dtype=torch.float16)

    def step(self, x, y):
        with self.amp_autocast():
            loss = self.model(x, y)
            loss.backward()
        self.optimizer.step()
'''


def _project_specs() -> List:
    return [s for s in rule_specs() if "def check_project(" in Path(_module_file(s.module)).read_text(encoding="utf-8")]


def _module_file(module: str) -> str:
    import importlib.util

    found = importlib.util.find_spec(module)
    assert found is not None and found.origin
    return found.origin


def test_the_project_rules_are_found():
    codes = {s.code for s in _project_specs()}
    assert {"AMP107", "AMP201", "AMP202", "AMP302", "AMP303", "AMP402"} <= codes
    assert codes == {r.code for r in project_rules(rule_specs())}


# ------------------------------------------------------------------ behaviour


_CHECK_PROJECTS = r"""
import json, sys
from amplint.core.config import Config
from amplint.engine.crossfile import Projects, project_diagnostics, project_rules
from amplint.engine.discovery import discover
from amplint.engine.pipeline import selected_rules

config = Config()
codes, rules = selected_rules(config)
loaded = [r.code for r in project_rules(rules)]
found = []
for root in sys.argv[1:]:
    files = list(discover([root], config))
    found += [d.code for d in project_diagnostics(Projects([root], files, config), rules, codes)]
heavy = sorted(m for m in sys.modules if m == "libcst" or m.startswith("libcst.") or m == "amplint.model.context")
print(json.dumps({"loaded": loaded, "found": found, "heavy": heavy}))
"""


def test_every_check_project_runs_without_libcst(tmp_path):
    """Every rule with a project half is imported and runs its `check_project` to a finding
    (the fixture projects, plus a held-autocast backward for AMP202) with libcst never imported."""
    extra = tmp_path / "held"
    (extra / "kit").mkdir(parents=True)
    (extra / "pyproject.toml").write_text("")
    (extra / "kit" / "__init__.py").write_text("")
    (extra / "kit" / "loop.py").write_text(HELD_BACKWARD)
    roots = [str(p) for p in sorted(PROJECTS.iterdir()) if p.is_dir()] + [str(extra)]
    out = subprocess.run([sys.executable, "-c", _CHECK_PROJECTS, *roots], capture_output=True, text=True, cwd=tmp_path)
    assert out.returncode == 0, out.stderr[-3000:]
    import json

    data = json.loads(out.stdout)
    wanted = {s.code for s in _project_specs()}
    assert set(data["loaded"]) == wanted
    assert set(data["found"]) == wanted, "each project rule's check_project found its fixture's bug"
    assert data["heavy"] == [], f"the project pass imported {data['heavy']}"


def _imports(args: List[str], cwd: Path) -> Set[str]:
    """The top-level modules `amplint ARGS` imported, its forked workers included."""
    out = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "amplint._start", *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        env={k: v for k, v in os.environ.items() if k != "AMPLINT_CACHE_DIR"},
    )
    assert out.returncode in (0, 1), out.stderr[-2000:]
    return {line.rsplit("|", 1)[1].strip().split(".")[0] for line in out.stderr.splitlines() if line.startswith("import time:") and "|" in line}


def test_a_pool_run_where_no_file_passes_a_gate_imports_no_libcst(tmp_path):
    """Big enough for the process pool; the parent's probe finds nothing to parse, so neither
    it nor the workers import libcst."""
    for i in range(10):
        (tmp_path / f"m{i}.py").write_text(f"import os\n\n\ndef f{i}(x):\n    return os.path.join(x, 'y')\n" + "# plain\n" * 20000)
    assert "libcst" not in _imports([str(tmp_path), "--isolated", "--no-cache", "--jobs", "2"], tmp_path)


def test_an_edit_no_gate_lets_through_reruns_the_project_pass_without_libcst(tmp_path):
    """`models/unet.py` imports the BCE loss module (it is in the project model's universe) but
    passes no rule's gate: after an edit, a one-file run recomputes the project's findings
    (the file's digest changed) and parses nothing, so it imports no libcst."""
    root = tmp_path / "proj"
    shutil.copytree(PROJECTS / "bce_loss_module", root)
    for path in root.rglob("*"):  # old enough for the cache to trust their stat
        st = path.stat()
        os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns - 60 * 10**9))
    cache = ["--isolated", "--cache-dir", str(tmp_path / "cache")]
    assert "libcst" in _imports([str(root), *cache], tmp_path)
    unet = root / "segkit" / "models" / "unet.py"
    unet.write_text(unet.read_text() + "\n# edited\n")
    before = unet.read_text()
    assert "libcst" not in _imports([str(unet), *cache], tmp_path)
    assert unet.read_text() == before
    out = subprocess.run(
        [sys.executable, "-m", "amplint._start", str(root / "segkit" / "losses.py"), *cache], capture_output=True, text=True, cwd=tmp_path
    )
    assert "losses.py:22:15: AMP303" in out.stdout


# ------------------------------------------------------------------ the idiom, statically


def _runtime_uses(tree: ast.Module, guarded: Set[str]) -> Dict[str, List[int]]:
    """Lines where a name of `guarded` is evaluated at run time without an import of it in
    an enclosing function (annotations are strings under `from __future__ import annotations`)."""
    bad: Dict[str, List[int]] = {}

    def local_imports(func: ast.AST) -> Set[str]:
        names = set()
        for node in ast.walk(func):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                names.update((a.asname or a.name).split(".")[0] for a in node.names)
        return names

    def visit(node: ast.AST, bound: Set[str]) -> None:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            args = node.args
            for d in [*args.defaults, *(d for d in args.kw_defaults if d is not None)]:
                visit(d, bound)  # evaluated where the function is defined
            if not isinstance(node, ast.Lambda):
                for d in node.decorator_list:
                    visit(d, bound)
            inner = bound | local_imports(node)
            for stmt in (node.body if not isinstance(node, ast.Lambda) else [node.body]):
                visit(stmt, inner)
            return
        if isinstance(node, ast.AnnAssign):
            if node.value is not None:
                visit(node.value, bound)
            visit(node.target, bound)
            return
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            return
        if isinstance(node, ast.Name) and node.id in guarded and node.id not in bound:
            bad.setdefault(node.id, []).append(node.lineno)
        for child in ast.iter_child_nodes(node):
            visit(child, bound)

    visit(tree, set())
    return bad


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


@pytest.mark.parametrize("module", sorted({s.module for s in _project_specs()}))
def test_per_file_names_are_imported_where_they_run(module):
    """A name imported only under TYPE_CHECKING is evaluated only in functions that import it
    (else the per-file check would raise NameError on a path its examples miss)."""
    tree = ast.parse(Path(_module_file(module)).read_text(encoding="utf-8"))
    guarded: Set[str] = set()
    plain: Set[str] = set()
    for node in tree.body:
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            for stmt in ast.walk(node):
                if isinstance(stmt, (ast.Import, ast.ImportFrom)):
                    guarded.update((a.asname or a.name).split(".")[0] for a in stmt.names)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            plain.update((a.asname or a.name).split(".")[0] for a in node.names)
    assert "libcst" not in plain and "cst" not in plain, f"{module} imports libcst at module level"
    assert _runtime_uses(tree, guarded - plain) == {}


def test_the_static_check_can_fail():
    source = (
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n    import libcst as cst\n"
        "def ok(node: cst.Call) -> bool:\n    import libcst as cst\n    return isinstance(node, cst.Call)\n"
        "def bad(node: cst.Call) -> bool:\n    return isinstance(node, cst.Name)\n"
    )
    assert _runtime_uses(ast.parse(source), {"cst"}) == {"cst": [8]}


# ------------------------------------------------------------------ the universe of a warm run


def test_a_warm_run_reads_the_universe_back_and_an_edit_recomputes_it(tmp_path, monkeypatch):
    """The universe reads every file's text index; when no file of the project changed
    (the same key of paths and digests) the recorded one is used, in a whole run and in a
    one-file run; an edit that changes what it holds is seen."""
    import amplint.model.project as model
    from amplint import Config, lint_paths
    from amplint.engine.cache import Cache

    root = tmp_path / "proj"
    shutil.copytree(PROJECTS / "bce_loss_module", root)
    for path in root.rglob("*"):
        st = path.stat()
        os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns - 60 * 10**9))
    computed = []
    real = model.universe
    monkeypatch.setattr(model, "universe", lambda *a, **k: computed.append(1) or real(*a, **k))

    def run(paths):
        cache = Cache(str(tmp_path / "cache"), "fp")
        found = sorted(f"{Path(d.filename).name}:{d.location.row} {d.code}" for d in lint_paths([str(p) for p in paths], Config(), cache=cache).diagnostics)
        cache.save()
        return found

    cold = run([root])
    assert computed == [1] and "losses.py:22 AMP303" in cold
    assert run([root]) == cold and computed == [1], "warm: read back"
    losses = root / "segkit" / "losses.py"
    assert run([losses]) == [f for f in cold if f.startswith("losses.py")] and computed == [1], "one file, warm project"
    unet = root / "segkit" / "models" / "unet.py"
    unet.write_text(unet.read_text().replace("from ..losses import DiceBCELoss", "from ..losses import DiceBCELoss  # edited"))
    assert run([root]) == cold and computed == [1, 1], "an edited file: computed again"
    trainer = root / "segkit" / "engine" / "trainer.py"
    trainer.write_text(trainer.read_text().replace("autocast", "no_autocast_here"))
    edited = run([root])
    assert computed == [1, 1, 1] and "losses.py:22 AMP303" not in edited
