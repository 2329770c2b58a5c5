"""Sites that never run (issue 22): one reachability fact of the project, read for every
finding after the lint (`engine/crossfile.drop_unreached`, and `lint_source` for one text).

Three shapes, each decided only when it is certain; anything else keeps the finding:

- a branch a constant test excludes: `use_empty_init = True` (a name bound once, to a literal
  bool, by a statement of the function's or module's own body before the test, and bound
  nowhere else in that scope or below it), then `if use_empty_init: ... else: <site>`;
- a branch guarded by a parameter whose literal default (False, None, 0) is all it ever holds:
  `def create_ddp_model(model, *, fp16_compression=False, **kwargs)` that no call of the
  project passes (by keyword or position, with no `*args`/`**kwargs` at the call, every
  reference to the function a call, no alias, no string naming it, the function undecorated,
  a method only of a class with no base outside torch's `nn.Module`), the parameter never
  rebound; the same constants switch an autocast off (`autocast(enabled=enable_autocast)`),
  and a finding whose cause is that region (`data["region_row"]`) is dropped with it;
- a file that cannot be imported: a statement of its module body imports a project package
  (a regular package, `__init__.py`, in the file's folder or a folder above it up to the
  project root, every such copy) whose module file (a `.py`, not the package: an absent
  submodule or a name the package lacks may be a built extension) binds no such name (no star import, `__getattr__`, `globals()`, `setattr`, `sys.modules` or
  `__path__` that could bind it, no compiled or generated module of that name). Every row
  after that import, and every function and class body, never runs.

Python's `ast` only (the project layer never imports libcst)."""
from __future__ import annotations

import ast
import os
import re
from typing import Any, Callable, Dict, FrozenSet, Iterable, List, Optional, Set, Tuple

#: a value not known statically
UNKNOWN = object()
#: decorators that keep a function's calls the calls the project spells
_PLAIN_DECORATORS = ("staticmethod", "classmethod")
#: bases whose methods only the project calls (torch calls `forward` and dunders, left out)
_PLAIN_BASES = ("object", "Module", "nn.Module", "torch.nn.Module")
#: `nn.Module` methods torch calls itself, with its own arguments (`state_dict(keep_vars=...)` on
#: every child): an override's parameters are not what the project's calls pass
_MODULE_METHODS = frozenset((
    "state_dict", "load_state_dict", "train", "eval", "apply", "to", "cuda", "cpu", "half", "float", "double",
    "bfloat16", "type", "zero_grad", "requires_grad_", "named_parameters", "parameters", "named_buffers",
    "buffers", "named_modules", "modules", "named_children", "children", "extra_repr", "share_memory",
    "to_empty", "get_submodule", "get_parameter", "get_buffer", "set_extra_state", "get_extra_state",
))
#: what may bind a module's names where no statement spells them, read off its text (`setattr`,
#: `vars()`, `locals()` and a module `__getattr__` are read off its tree: `_binds_dynamically`)
_DYNAMIC = re.compile(r"\b(globals\s*\(|sys\.modules|__path__|exec\s*\(|import_module|__import__|__builtins__)")
#: folders a run puts on `sys.path` besides the script's own: a packaging file installs the
#: package it holds (`pip install -e .`), a conftest.py is pytest's rootdir insertion
_IMPORT_ROOTS = ("setup.py", "setup.cfg", "pyproject.toml", "conftest.py")


class FileReach:
    """What never runs in one file: row ranges (first, last, why), the rows of autocast calls
    never switched on, and the row from which the whole module fails at import."""

    def __init__(self) -> None:
        self.rows: List[Tuple[int, int, str]] = []
        self.off_regions: Set[int] = set()
        self.fails_at: Optional[Tuple[int, str]] = None
        self.bodies: List[Tuple[int, int]] = []  # function and class bodies (dead when the import fails)

    def __eq__(self, other: object) -> bool:  # the server re-publishes a document only when its verdict changes
        return isinstance(other, FileReach) and (self.rows, self.off_regions, self.fails_at, self.bodies) == (
            other.rows, other.off_regions, other.fails_at, other.bodies)

    __hash__ = None  # type: ignore[assignment]

    def why(self, row: int, region_row: Optional[int] = None) -> Optional[str]:
        """Why a finding at `row` (its cause the autocast at `region_row`) never happens, or None."""
        if self.fails_at is not None:
            at, reason = self.fails_at
            if row > at or any(a <= row <= b for a, b in self.bodies):
                return reason
        for first, last, reason in self.rows:
            if first <= row <= last:
                return reason
        if region_row is not None and region_row in self.off_regions:
            return "its autocast is never switched on"
        return None


class Reach:
    """The fact over the run's projects: `files`, every Python file (absolute paths) whose
    calls count; `read(path)`: a file's text or None."""

    def __init__(self, files: Iterable[str], read: Callable[[str], Optional[str]]) -> None:
        self.files = list(files)
        self.read = read
        self.root: Optional[str] = None
        self._texts: Dict[str, Optional[str]] = {}
        self._trees: Dict[str, Optional[ast.Module]] = {}
        self._passed: Dict[Tuple[str, str, Signature], bool] = {}
        self._attr_stores: Dict[str, bool] = {}
        self._files: Dict[str, FileReach] = {}

    # -- texts and trees -------------------------------------------------------------------
    def text(self, path: str) -> Optional[str]:
        if path not in self._texts:
            try:
                self._texts[path] = self.read(path)
            except Exception:  # an unreadable file decides nothing
                self._texts[path] = None
        return self._texts[path]

    def tree(self, path: str) -> Optional[ast.Module]:
        if path not in self._trees:
            text = self.text(path)
            try:
                self._trees[path] = ast.parse(text) if text is not None else None
            except (SyntaxError, ValueError, RecursionError, MemoryError):
                self._trees[path] = None
        return self._trees[path]

    # -- the fact --------------------------------------------------------------------------
    def of(self, path: str, root: Optional[str] = None) -> FileReach:
        """The fact for one file; `root`: its project's root (None: no import is decided)."""
        found = self._files.get(path)
        if found is None:
            found = self._files[path] = FileReach()
            tree = self.tree(path)
            if tree is not None:
                _Scopes(self, path, tree, found).run()
                if root is not None:
                    self.root = root
                    fails = self._import_failure(path, tree)
                    if fails is not None:
                        found.fails_at = fails
                        found.bodies = [
                            (n.body[0].lineno, n.end_lineno or n.lineno) for n in ast.walk(tree)
                            if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and n.body
                        ]
        return found

    # -- parameters no call passes ---------------------------------------------------------
    def never_passed(self, name: str, param: str, sig: "Signature") -> bool:
        """Some call of the project calls a function or method `name` of signature `sig`, no such
        call passes parameter `param`, and every other reference to `name` is a call that cannot
        be one of it (its arguments do not fit `sig`: another function of that name)."""
        key = (name, param, sig)
        if key not in self._passed:
            self._passed[key] = self._never_passed(name, param, sig)
        return self._passed[key]

    def _never_passed(self, name: str, param: str, sig: "Signature") -> bool:
        word = re.compile(r"\b%s\b" % re.escape(name))
        calls = 0
        for path in self.files:
            text = self.text(path)
            if text is None:
                continue
            if not word.search(text):
                continue
            tree = self.tree(path)
            if tree is None:
                return False
            found = _calls_leave_off(tree, name, param, sig)
            if found is None:
                return False
            calls += found
        return calls > 0  # no call at all: an API called from outside the project, with anything

    def attribute_stored(self, name: str) -> bool:
        """Some file of the project binds `<x>.name = ...` or names it in a string (a module
        constant another module may set)."""
        if name not in self._attr_stores:
            pattern = re.compile(r"\.%s\s*(=[^=]|:)|['\"]%s['\"]" % (re.escape(name), re.escape(name)))
            self._attr_stores[name] = any(pattern.search(t or "") for t in (self.text(p) for p in self.files))
        return self._attr_stores[name]

    # -- imports that fail -----------------------------------------------------------------
    def _import_failure(self, path: str, tree: ast.Module) -> Optional[Tuple[int, str]]:
        text = self.text(path) or ""
        if "sys.path" in text or "__path__" in text:
            return None  # the file changes where imports come from
        for stmt in tree.body:
            if isinstance(stmt, ast.ImportFrom):
                reason = self._from_fails(path, stmt)
            elif isinstance(stmt, ast.Import):
                reason = next((r for r in (self._module_fails(path, a.name, 0) for a in stmt.names) if r), None)
            else:
                continue
            if reason:
                return stmt.lineno, reason
        return None

    def _packages(self, path: str, top: str, root: str) -> List[str]:
        """Every regular package `top` in the file's folder or a folder above it, up to the root;
        none unless one of them is where a run imports it from: the file's own folder (a
        script's `sys.path[0]`) or a folder holding a packaging file or a conftest.py
        (`_IMPORT_ROOTS`). A package only some other folder above holds is imported from
        wherever `sys.path` says, site-packages included, whose copy may bind more: not decided."""
        root = os.path.abspath(root)
        here = folder = os.path.dirname(os.path.abspath(path))
        found: List[str] = []
        rooted = False
        while folder == root or folder.startswith(root.rstrip(os.sep) + os.sep):
            candidate = os.path.join(folder, top)
            if os.path.isfile(os.path.join(candidate, "__init__.py")):
                found.append(candidate)
                rooted = rooted or folder == here or any(os.path.isfile(os.path.join(folder, f)) for f in _IMPORT_ROOTS)
            elif os.path.exists(candidate + ".py") or os.path.isdir(candidate):
                return []  # a module or a namespace folder of that name: not decided here
            parent = os.path.dirname(folder)
            if parent == folder:
                break
            folder = parent
        return found if rooted else []

    def _resolve(self, path: str, module: str, level: int) -> Tuple[List[str], List[str]]:
        """(the package folders the module's first name is, the remaining names) or ([], [])."""
        parts = module.split(".") if module else []
        if level:
            folder = os.path.dirname(os.path.abspath(path))
            for _ in range(level - 1):
                folder = os.path.dirname(folder)
            if not os.path.isfile(os.path.join(folder, "__init__.py")):
                return [], []
            return [folder], parts
        if not parts:
            return [], []
        return self._packages(path, parts[0], self.root or ""), parts[1:]

    def _module_fails(self, path: str, module: str, level: int, names: Tuple[str, ...] = ()) -> Optional[str]:
        bases, rest = self._resolve(path, module, level)
        if not bases:
            return None
        reasons = [self._fails_in(base, rest, module, names) for base in bases]
        return reasons[0] if all(reasons) else None

    def _from_fails(self, path: str, stmt: ast.ImportFrom) -> Optional[str]:
        names = tuple(a.name for a in stmt.names)
        if "*" in names:
            names = ()
        return self._module_fails(path, stmt.module or "", stmt.level, names)

    def _fails_in(self, base: str, rest: List[str], module: str, names: Tuple[str, ...]) -> Optional[str]:
        """Why importing `rest` below the package folder `base` (then `names` from it) fails."""
        here = base
        for i, part in enumerate(rest):
            if not self._plain_package(here):
                return None
            sub = os.path.join(here, part)
            if os.path.isdir(sub):
                here = sub
                continue
            if os.path.isfile(sub + ".py"):
                if i != len(rest) - 1:
                    return None  # a module used as a package: left alone
                return self._binds_all(sub + ".py", None, module, names)
            return None  # an absent module may be built (a compiled extension whose name no file spells)
        if not os.path.isdir(here):
            return None
        init = os.path.join(here, "__init__.py")
        return self._binds_all(init if os.path.isfile(init) else None, here, module, names)

    def _plain_package(self, folder: str) -> bool:
        init = os.path.join(folder, "__init__.py")
        if not os.path.isfile(init):
            return os.path.isdir(folder)
        text, tree = self.text(init), self.tree(init)
        return text is not None and tree is not None and not _DYNAMIC.search(text) and not _binds_dynamically(tree)

    def _binds_all(self, file: Optional[str], package: Optional[str], module: str, names: Tuple[str, ...]) -> Optional[str]:
        if not names:
            return None
        bound: Optional[Set[str]] = set()
        if file is not None:
            text = self.text(file)
            tree = self.tree(file)
            if text is None or tree is None or _DYNAMIC.search(text) or _binds_dynamically(tree):
                return None
            bound = _module_names(tree)
            if bound is None:
                return None
        for name in names:
            if name in bound:
                continue
            if package is not None and (os.path.isdir(os.path.join(package, name)) or os.path.isfile(os.path.join(package, name + ".py"))):
                continue
            if package is not None:
                return None  # a package's absent submodule may be built (a compiled extension)
            if self.attribute_stored(name):
                return None  # `mod.name = ...`, `setattr(mod, "name", ...)` somewhere: it may be bound
            if self.defined_below(package or os.path.dirname(file or ""), name):
                return None  # the package's own code defines it: a copy installed from a release may export it
            return f"`{module}` binds no `{name}` in the project"
        return None

    def defined_below(self, folder: str, name: str) -> bool:
        """Some module in `folder` or below defines `name` at its top level (`class name`, `def
        name`, `name = ...` at column 0): the package holds it, only this path does not export it
        (`from dualcodec import BaseTrainer`, defined in `dualcodec/utils/base_trainer.py`)."""
        if not folder:
            return False
        prefix = os.path.abspath(folder).rstrip(os.sep) + os.sep
        pattern = re.compile(r"^(?:(?:async\s+)?def\s+|class\s+)%s\b|^%s\s*(?::[^=\n]*)?=[^=]" % (re.escape(name), re.escape(name)), re.M)
        return any(pattern.search(self.text(p) or "") for p in self.files if os.path.abspath(p).startswith(prefix))

def _binds_dynamically(tree: ast.Module) -> bool:
    """The module may bind names no statement of it spells: a module-level `__getattr__`
    (PEP 562), `vars()` or `locals()` read at module level (its globals), or a `setattr` on
    anything but a module it imports from elsewhere or a method's own `self`/`cls`
    (`setattr(dist, func.__name__, patched)` binds nothing here; `setattr(this, name, v)` may)."""
    imported: Set[str] = set()
    other: Set[str] = set()
    for stmt in tree.body:
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)) and stmt.name == "__getattr__":
            return True
    for n in ast.walk(tree):
        if isinstance(n, ast.alias):
            imported.add(n.asname or n.name.split(".")[0])
        elif isinstance(n, ast.Name) and isinstance(n.ctx, (ast.Store, ast.Del)) or isinstance(n, ast.arg):
            other.add(n.id if isinstance(n, ast.Name) else n.arg)
        elif isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            other.add(n.name)
    for stmt in tree.body:
        if isinstance(stmt, (ast.Assign, ast.AnnAssign)) and any(
            isinstance(t, ast.Name) and t.id == "__getattr__" for t in (stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target])
        ):
            return True
    selves = _method_selves(tree)
    inside = {id(n) for f in ast.walk(tree) if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)) for n in ast.walk(f) if n is not f}
    for n in ast.walk(tree):
        if not isinstance(n, ast.Call) or not isinstance(n.func, ast.Name):
            continue
        if n.func.id in ("vars", "locals") and not n.args and id(n) not in inside:
            return True
        if n.func.id != "setattr":
            continue
        target = n.args[0] if n.args else None
        while isinstance(target, (ast.Attribute, ast.Subscript)):
            target = target.value
        if isinstance(target, ast.Name) and target.id in imported and target.id not in other:
            continue  # a module imported from elsewhere (an import of this module itself is rare)
        if isinstance(target, ast.Name) and id(target) in selves:
            continue
        return True
    return False


def _method_selves(tree: ast.Module) -> Set[int]:
    """The `self`/`cls` names (node ids) a method reads: its first parameter, never rebound."""
    out: Set[int] = set()
    for cls in ast.walk(tree):
        if not isinstance(cls, ast.ClassDef):
            continue
        for f in cls.body:
            if not isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef)) or not (f.args.posonlyargs or f.args.args):
                continue
            if any(isinstance(d, ast.Name) and d.id == "staticmethod" for d in f.decorator_list):
                continue
            first = (f.args.posonlyargs or f.args.args)[0].arg
            names = [n for n in ast.walk(f) if isinstance(n, ast.Name) and n.id == first]
            if any(not isinstance(n.ctx, ast.Load) for n in names):
                continue
            out.update(id(n) for n in names)
    return out


def _module_names(tree: ast.Module) -> Optional[Set[str]]:
    """Every name a module binds at its top level (in any branch), None where a star import or
    a `global` statement may bind more."""
    names: Set[str] = set()

    def targets(node: ast.AST) -> None:
        for n in ast.walk(node):
            if isinstance(n, ast.Name):
                names.add(n.id)

    stack: List[ast.AST] = list(tree.body)
    while stack:
        stmt = stack.pop()
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(stmt.name)
            if any(isinstance(n, ast.Global) for n in ast.walk(stmt)):
                return None
            continue
        if isinstance(stmt, (ast.Import, ast.ImportFrom)):
            for a in stmt.names:
                if a.name == "*":
                    return None
                names.add(a.asname or a.name.split(".")[0])
            continue
        if isinstance(stmt, ast.Assign):
            for t in stmt.targets:
                targets(t)
        elif isinstance(stmt, (ast.AnnAssign, ast.AugAssign)):
            targets(stmt.target)
        elif isinstance(stmt, (ast.For, ast.AsyncFor)):
            targets(stmt.target)
        elif isinstance(stmt, (ast.With, ast.AsyncWith)):
            for item in stmt.items:
                if item.optional_vars is not None:
                    targets(item.optional_vars)
        elif isinstance(stmt, ast.Try):
            for h in stmt.handlers:
                if h.name:
                    names.add(h.name)
                stack.extend(h.body)
        for n in ast.walk(stmt) if not isinstance(stmt, ast.Try) else ():
            if isinstance(n, ast.NamedExpr) and isinstance(n.target, ast.Name):
                names.add(n.target.id)
        for field in ("body", "orelse", "finalbody"):
            stack.extend(getattr(stmt, field, None) or [])
    return names


#: a function's parameters: (positional names, those without a default, keyword-only names,
#: those without a default, *args, **kwargs, a method whose first parameter the call binds)
Signature = Tuple[Tuple[str, ...], FrozenSet[str], Tuple[str, ...], FrozenSet[str], bool, bool, bool]


def _binds(call: ast.Call, sig: Signature, skip: int) -> Optional[Set[str]]:
    """The parameters `call` binds when it calls a function of `sig` with the first `skip`
    positional parameters already bound, or None where its arguments do not fit (a call of it
    would raise TypeError: another function of that name)."""
    positional, required, kwonly, kw_required, varargs, varkw, _ = sig
    available = positional[skip:]
    if len(call.args) > len(available) and not varargs:
        return None
    bound = set(available[: len(call.args)])
    for k in call.keywords:
        if k.arg is None:
            continue
        if k.arg in bound or (k.arg not in available and k.arg not in kwonly and not varkw) or k.arg in positional[:skip]:
            return None
        bound.add(k.arg)
    if not (required & set(available)) <= bound or not kw_required <= bound:
        return None
    return bound


def _calls_leave_off(tree: ast.Module, name: str, param: str, sig: Signature) -> Optional[int]:
    """How many calls in the tree may call `name` (of `sig`) and pass nothing for `param`; None
    where one may pass it (by keyword or position, `*args`/`**kwargs` at the call), or `name`
    is referred to otherwise (an alias, a value passed on, a string naming it)."""
    calls = 0
    parents: Dict[int, ast.AST] = {}
    docs: Set[int] = set()
    for node in ast.walk(tree):
        for child in ast.iter_child_nodes(node):
            parents[id(child)] = node
        body = getattr(node, "body", None)
        if isinstance(body, list) and body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
            docs.add(id(body[0].value))  # a docstring naming the function calls nothing
    word = re.compile(r"(?<![\w])%s(?![\w])" % re.escape(name))
    spelled = lambda text: bool(word.search(text))  # noqa: E731
    for node in ast.walk(tree):
        if isinstance(node, ast.alias):
            if node.name.split(".")[-1] == name and node.asname not in (None, name):
                return None  # called under another name
            continue
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docs and (
            node.value == param or spelled(node.value)
        ):
            parent = parents.get(id(node))
            if not (isinstance(parent, (ast.List, ast.Tuple)) and _is_all(parents.get(id(parent)))):
                return None  # getattr(obj, "name"), "pkg.mod.name" for a registry, a parametrize of "param"
            continue
        if isinstance(node, ast.Name) and node.id == name or isinstance(node, ast.Attribute) and node.attr == name:
            call = parents.get(id(node))
            if not isinstance(call, ast.Call) or call.func is not node:
                return None  # passed as a value, stored, wrapped: its calls are not spelled here
            if any(isinstance(a, ast.Starred) for a in call.args) or any(k.arg is None for k in call.keywords):
                return None  # `f(*args, **kwargs)`: anything may be passed
            # `f(...)` binds from the first parameter; `obj.m(...)` from the second of a method
            # (`Class.m(obj, ...)`, `module.f(...)`: from the first)
            skips = (0,) if isinstance(node, ast.Name) else ((1, 0) if sig[6] else (0,))
            fits = [b for b in (_binds(call, sig, k) for k in skips) if b is not None]
            if any(param in b for b in fits):
                return None
            calls += bool(fits)
    return calls


def _is_all(node: Optional[ast.AST]) -> bool:
    return isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets)


def _bound_names(node: ast.AST) -> Dict[str, int]:
    """How many times each name is bound anywhere in `node` (its nested scopes too)."""
    counts: Dict[str, int] = {}

    def add(n: str) -> None:
        counts[n] = counts.get(n, 0) + 1

    for n in ast.walk(node):
        if isinstance(n, ast.Name) and isinstance(n.ctx, (ast.Store, ast.Del)):
            add(n.id)
        elif isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            add(n.name)
        elif isinstance(n, ast.alias):
            add(n.asname or n.name.split(".")[0])
        elif isinstance(n, ast.arg):
            add(n.arg)
        elif isinstance(n, ast.ExceptHandler) and n.name:
            add(n.name)
        elif isinstance(n, (ast.Global, ast.Nonlocal)):
            for g in n.names:
                counts[g] = counts.get(g, 0) + 2  # bound from another scope: never a constant
        elif isinstance(n, ast.ImportFrom) and any(a.name == "*" for a in n.names):
            counts["*"] = 1
    return counts


def _literal(node: Optional[ast.AST]) -> Any:
    if isinstance(node, ast.Constant) and (node.value is None or isinstance(node.value, (bool, int))):
        return node.value
    return UNKNOWN


class _Scopes:
    """The constant tests of one file, scope by scope."""

    def __init__(self, reach: Reach, path: str, tree: ast.Module, out: FileReach) -> None:
        self.reach = reach
        self.path = path
        self.tree = tree
        self.out = out

    def run(self) -> None:
        counts = _bound_names(self.tree)
        module: Dict[str, Tuple[Any, int]] = {}
        if "*" not in counts:
            for stmt in self.tree.body:
                if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name):
                    name, value = stmt.targets[0].id, _literal(stmt.value)
                    if isinstance(value, bool) and counts.get(name) == 1:
                        module[name] = (value, stmt.lineno)
        self._scope(self.tree, self.tree.body, module, {}, None)

    def _scope(self, owner: ast.AST, body: List[ast.stmt], module: Dict[str, Tuple[Any, int]],
               params: Dict[str, Any], cls: Optional[ast.ClassDef]) -> None:
        # how often each name is bound in this scope and below: walked only where something reads it
        memo: List[Dict[str, int]] = []

        def counts() -> Dict[str, int]:
            if not memo:
                memo.append(_bound_names(owner) if not isinstance(owner, ast.Module) else {})
            return memo[0]

        local: Dict[str, Tuple[Any, int]] = {}
        if not isinstance(owner, ast.Module):
            for stmt in body:
                if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name):
                    name, value = stmt.targets[0].id, _literal(stmt.value)
                    if isinstance(value, bool) and counts().get(name) == 1:
                        local[name] = (value, stmt.lineno)
        shadowed = (lambda name: name in counts()) if not isinstance(owner, ast.Module) else (lambda name: False)

        def value(name: str, row: int) -> Any:
            if name in local:
                v, at = local[name]
                return v if at < row else UNKNOWN
            if name in params:
                return params[name]() if callable(params[name]) else params[name]
            if name in module and not shadowed(name):
                v, at = module[name]
                if isinstance(owner, ast.Module) and at >= row:
                    return UNKNOWN
                return v if not self.reach.attribute_stored(name) else UNKNOWN
            return UNKNOWN

        for node in _own_nodes(body):
            if isinstance(node, ast.If):
                test = _evaluate(node.test, lambda n: value(n, node.lineno))
                if test is not UNKNOWN:
                    dead = node.orelse if test else node.body
                    if dead:
                        why = f"the test `{ast.unparse(node.test)[:40]}` is always {bool(test)}"
                        self.out.rows.append((dead[0].lineno, dead[-1].end_lineno or dead[-1].lineno, why))
            elif isinstance(node, ast.Call) and _called_name(node.func) == "autocast":
                enabled = next((k.value for k in node.keywords if k.arg == "enabled"), None)
                if enabled is not None and _evaluate(enabled, lambda n: value(n, node.lineno)) is False:
                    self.out.off_regions.add(node.lineno)
            elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                self._scope(node, node.body, module, self._params(node, cls), None)
            elif isinstance(node, ast.ClassDef):
                self._scope(node, node.body, module, {}, node)

    def _params(self, func: ast.AST, cls: Optional[ast.ClassDef]) -> Dict[str, Any]:
        """The parameters of `func` whose literal default is all they hold (lazy: read on use)."""
        assert isinstance(func, (ast.FunctionDef, ast.AsyncFunctionDef))
        if any(_called_name(d) not in _PLAIN_DECORATORS for d in func.decorator_list):
            return {}
        if func.name.startswith("__") or func.name == "forward":
            return {}
        if cls is not None and (cls.decorator_list or any(ast.unparse(b) not in _PLAIN_BASES for b in cls.bases) or cls.keywords):
            return {}
        if cls is not None and (func.name.startswith("_") or func.name in _MODULE_METHODS):
            return {}  # torch's own calls (`_load_from_state_dict`, `state_dict` on each child)
        args = func.args
        positional = [*args.posonlyargs, *args.args]
        defaults = dict(zip([a.arg for a in positional[len(positional) - len(args.defaults):]], args.defaults))
        defaults.update({a.arg: d for a, d in zip(args.kwonlyargs, args.kw_defaults) if d is not None})
        defaults = {n: d for n, d in defaults.items() if _literal(d) is not UNKNOWN and _literal(d) in (False, None, 0)}
        if not defaults:
            return {}
        counts = _bound_names(func)
        out: Dict[str, Any] = {}
        static = any(_called_name(d) == "staticmethod" for d in func.decorator_list)
        sig: Signature = (
            tuple(a.arg for a in positional),
            frozenset(a.arg for a in positional[: len(positional) - len(args.defaults)]),
            tuple(a.arg for a in args.kwonlyargs),
            frozenset(a.arg for a, d in zip(args.kwonlyargs, args.kw_defaults) if d is None),
            args.vararg is not None, args.kwarg is not None, cls is not None and not static,
        )
        for name, default in defaults.items():
            literal = _literal(default)
            if literal is UNKNOWN or literal not in (False, None, 0) or counts.get(name, 0) != 1:
                continue
            out[name] = _lazy(self.reach, func.name, name, sig, literal)
        return out


def _lazy(reach: Reach, func: str, name: str, sig: Signature, literal: Any) -> Callable[[], Any]:
    return lambda: literal if reach.never_passed(func, name, sig) else UNKNOWN


def _own_nodes(body: List[ast.stmt]) -> Iterable[ast.AST]:
    """The nodes of a scope's body, not descending into nested functions and classes (yielded
    themselves, once)."""
    stack: List[ast.AST] = list(reversed(body))
    while stack:
        node = stack.pop()
        yield node
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)):
            continue
        stack.extend(reversed(list(ast.iter_child_nodes(node))))


def _called_name(node: ast.AST) -> str:
    if isinstance(node, ast.Call):
        node = node.func
    if isinstance(node, ast.Attribute):
        return node.attr
    if isinstance(node, ast.Name):
        return node.id
    return ""


def _evaluate(node: ast.AST, value: Callable[[str], Any]) -> Any:
    """A test's truth from constants (`value(name)`), or UNKNOWN."""
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, ast.Name):
        return value(node.id)
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
        v = _evaluate(node.operand, value)
        return UNKNOWN if v is UNKNOWN else not v
    if isinstance(node, ast.BoolOp):
        values = [_evaluate(v, value) for v in node.values]
        decisive = (lambda v: v is not UNKNOWN and not v) if isinstance(node.op, ast.And) else (lambda v: v is not UNKNOWN and bool(v))
        for v in values:
            if decisive(v):
                return v
        return UNKNOWN if any(v is UNKNOWN for v in values) else values[-1]
    if isinstance(node, ast.Compare) and len(node.ops) == 1 and isinstance(node.ops[0], (ast.Is, ast.IsNot)):
        left, right = _evaluate(node.left, value), _evaluate(node.comparators[0], value)
        if left is UNKNOWN or right is UNKNOWN or not (left is None or right is None):
            return UNKNOWN
        same = left is right
        return same if isinstance(node.ops[0], ast.Is) else not same
    return UNKNOWN
