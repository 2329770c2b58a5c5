"""mmcv's precision decorators: which applications of a Function only run under `@force_fp32`.

mmcv 1.x (`mmcv.runner.fp16_utils`, re-exported by `mmcv.runner`) gives OpenMMLab modules two
method decorators that act only when the module's `fp16_enabled` is true (`wrap_fp16_model`,
which mmcv's `Fp16OptimizerHook` runs before training, sets it on every module that has the
attribute):

* `@auto_fp16(apply_to=...)` casts the fp32 tensors among the named arguments to fp16 and runs
  the method under `torch.cuda.amp.autocast(enabled=True)`;
* `@force_fp32(apply_to=...)` casts the fp16 tensors among them (recursively through lists,
  tuples and dicts) to fp32 and runs the method under `autocast(enabled=False)`.

`apply_to=None` (the default) means every argument; a string `apply_to` is tested with `in`, a
substring test. Without `fp16_enabled` on the module (or with it false) both are no-ops.
mmengine (and mmcv 2.x, which dropped `mmcv.runner`) has no such decorators, only an
`autocast` context manager.

So a Function applied only in the body of a `@force_fp32()` method of a module that sets
`fp16_enabled`, in a project that turns the flag on, gets fp32 tensors and runs with autocast
off: its forward's ops stay fp32 and a kernel gets what its author wrote for (bevfusion's
`bev_pool`, applied by `BaseTransform.bev_pool`). `forced_only` answers that for AMP501, read
with `ast` when conditions are resolved: the Function's own file (its `.apply` calls, a
module-level alias `f = F.apply`, an undecorated module-level function of the file that applies
it, such as `bev_pool(feats, coords, ...)`) and every other project file spelling one of those
names. Any other use (a call outside such a method, a value passed on, an import under another
name, a notebook, a file that cannot be parsed, a listing cut at its limit) keeps the finding.

torch's `@custom_fwd(cast_inputs=torch.float32)` (`torch.cuda.amp.custom_fwd`, or
`torch.amp.custom_fwd(device_type=..., cast_inputs=torch.float32)`, also imported through a
project module re-exporting it, such as maskrcnn_benchmark's `utils/amp.py`) does the same for
any function or method, with no flag: under autocast it casts the floating tensors among the
arguments to fp32 and runs the body with autocast off (outside autocast it changes nothing, and
no autocast reaches the body either). So a Function applied only there (GLIP's `deform_conv`,
applied by `DeformConv.forward`) is forced too; a use in such a function needs no `fp16_enabled`.
A file defining its own module-level class or function of a followed name (a second
`QuickCumsumCuda` in `bev_pool_v2.py`) uses its own, not the followed one.
"""
from __future__ import annotations

import ast
import os
import re
from typing import Callable, Dict, List, Optional, Set, Tuple

from .project.astutil import dotted as _dotted
from .texts import files_stamp, project_root, read_text, whole_listing

#: the modules mmcv's `force_fp32` is imported from (also inside a vendored copy of mmcv)
_MMCV_RUNNER = re.compile(r"(?:^|\.)mmcv\.runner(?:\.fp16_utils)?$")
#: torch's decorator casting a function's arguments (`cast_inputs=`) and turning autocast off
_CUSTOM_FWD = frozenset((
    "torch.cuda.amp.custom_fwd", "torch.amp.custom_fwd", "torch.cuda.amp.autocast_mode.custom_fwd",
    "torch.amp.autocast_mode.custom_fwd",
))
_FLOAT32 = frozenset(("torch.float32", "torch.float"))
#: what turns `fp16_enabled` on: mmcv's wrapper, the hook that calls it, a flag set by hand, or
#: an OpenMMLab config's `fp16 = dict(...)` (mmdet's and mmdet3d's `train_*` build the hook from it)
_FLIPS = re.compile(r"\bwrap_fp16_model\s*\(|\bFp16OptimizerHook\b|\.fp16_enabled\s*=\s*True\b|^fp16\s*=\s*dict\(", re.MULTILINE)
#: how many rounds of the file's own applying functions are followed (`f -> g -> F.apply`)
_ROUNDS = 3

_trees: Dict[Tuple[str, int, int], Optional[ast.Module]] = {}


def _tree(path: str) -> Optional[ast.Module]:
    try:
        st = os.stat(path)
    except OSError:
        return None
    key = (path, st.st_mtime_ns, st.st_size)
    if key not in _trees:
        if len(_trees) > 256:
            _trees.clear()
        text = read_text(path)
        try:
            _trees[key] = ast.parse(text) if text is not None else None
        except (SyntaxError, ValueError):
            _trees[key] = None
    return _trees[key]


def _parents(tree: ast.AST) -> Dict[int, ast.AST]:
    out: Dict[int, ast.AST] = {}
    for node in ast.walk(tree):
        for child in ast.iter_child_nodes(node):
            out[id(child)] = node
    return out


def _imported(tree: ast.Module, relative: bool = False) -> Dict[str, str]:
    """{local name: dotted name} for the file's imports (relative ones left out, unless
    `relative`: then spelled with their leading dots)."""
    out: Dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.asname:
                    out[alias.asname] = alias.name
                else:
                    top = alias.name.split(".")[0]
                    out[top] = top
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            for alias in node.names:
                out[alias.asname or alias.name] = f"{node.module}.{alias.name}"
        elif isinstance(node, ast.ImportFrom) and node.level and relative:
            for alias in node.names:  # `from ..utils.amp import custom_fwd`: `..utils.amp.custom_fwd`
                out[alias.asname or alias.name] = "." * node.level + (f"{node.module}." if node.module else "") + alias.name
    return out


def _casts_every_argument(decorator: ast.Call, method: ast.FunctionDef) -> bool:
    """`force_fp32()` (or `apply_to=None`), or an `apply_to` naming every parameter after `self`."""
    spelled = decorator.args[0] if decorator.args else None
    for k in decorator.keywords:
        if k.arg is None:
            return False
        if k.arg == "apply_to":
            spelled = k.value
    if spelled is None or (isinstance(spelled, ast.Constant) and spelled.value is None):
        return True
    params = [a.arg for a in (*method.args.posonlyargs, *method.args.args, *method.args.kwonlyargs)][1:]
    if method.args.vararg or method.args.kwarg:
        return False  # `*args`/`**kwargs` are cast only by `apply_to=None`
    if isinstance(spelled, ast.Constant) and isinstance(spelled.value, str):
        return all(p in spelled.value for p in params)  # mmcv tests `name in apply_to`: a substring
    if isinstance(spelled, (ast.Tuple, ast.List)) and all(isinstance(e, ast.Constant) and isinstance(e.value, str) for e in spelled.elts):
        names = {e.value for e in spelled.elts}  # type: ignore[attr-defined]
        return all(p in names for p in params)
    return False


def _sets_flag(cls: ast.ClassDef) -> bool:
    """The class assigns `self.fp16_enabled` (what `wrap_fp16_model` turns on)."""
    for node in ast.walk(cls):
        targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(node, ast.AnnAssign) else []
        if any(isinstance(t, ast.Attribute) and t.attr == "fp16_enabled" for t in targets):
            return True
    return False


def _resolved(spelled: str, imports: Dict[str, str]) -> Optional[str]:
    """The dotted name a decorator spelled `spelled` (`force_fp32`, `amp.custom_fwd`) stands for."""
    head, _, rest = spelled.partition(".")
    resolved = imports.get(head)
    if resolved is None:
        return None
    return f"{resolved}.{rest}" if rest else resolved


#: the dotted name a project module's name stands for, read in that module's imports
#: (`maskrcnn_benchmark.utils.amp.custom_fwd` -> `torch.cuda.amp.custom_fwd`), or None
Reexport = Callable[[str], Optional[str]]


def _casts_to_fp32(decorator: ast.Call, imports: Dict[str, str]) -> bool:
    """`custom_fwd(..., cast_inputs=torch.float32)` (or `torch.float`)."""
    for k in decorator.keywords:
        if k.arg == "cast_inputs":
            spelled = _dotted(k.value)
            return spelled is not None and _resolved(spelled, imports) in _FLOAT32
    return False


def forcing(function: ast.AST, parents: Dict[int, ast.AST], imports: Dict[str, str], reexport: Optional[Reexport] = None) -> Optional[str]:
    """How `function`'s body gets fp32 arguments with autocast off: "mmcv" for a method decorated
    with mmcv's `@force_fp32()` (every argument cast) of a class that sets `fp16_enabled` (which
    the project must turn on), "torch" for a function or method decorated with torch's
    `@custom_fwd(cast_inputs=torch.float32)` (`reexport` resolves a name a project module
    re-exports to what that module imports), None otherwise."""
    if not isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return None
    for d in function.decorator_list:
        if not isinstance(d, ast.Call):
            continue
        spelled = _dotted(d.func)
        if spelled is None or not spelled.endswith(("force_fp32", "custom_fwd")):
            continue
        full = _resolved(spelled, imports)
        if full is None:
            continue
        if spelled.endswith("custom_fwd"):
            if full not in _CUSTOM_FWD and reexport is not None:
                full = reexport(full) or full
            if full in _CUSTOM_FWD and _casts_to_fp32(d, imports):
                return "torch"
            continue
        cls = parents.get(id(function))
        if not isinstance(cls, ast.ClassDef) or not _sets_flag(cls):
            continue
        module, _, name = full.rpartition(".")
        if name == "force_fp32" and _MMCV_RUNNER.search(module) and _casts_every_argument(d, function):  # type: ignore[arg-type]
            return "mmcv"
    return None


def _forced(function: ast.AST, parents: Dict[int, ast.AST], imports: Dict[str, str]) -> bool:
    """`function` is a method decorated with mmcv's `@force_fp32()` (every argument cast) of a
    class that sets `fp16_enabled`."""
    return forcing(function, parents, imports) == "mmcv"


def _enclosing(node: ast.AST, parents: Dict[int, ast.AST]) -> Optional[ast.AST]:
    """The innermost function, lambda or class holding `node` (None at the module's top level)."""
    here = parents.get(id(node))
    while here is not None and not isinstance(here, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)):
        here = parents.get(id(here))
    return here


class _Modules:
    """The project's modules by dotted name (the tail of their paths), for a re-export."""

    def __init__(self, listing: List[str]) -> None:
        self.by_tail: Dict[str, List[str]] = {}
        for p in listing:
            if not p.endswith(".py"):
                continue
            parts = os.path.abspath(p)[:-3].split(os.sep)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            self.by_tail.setdefault(parts[-1], []).append(os.sep.join(parts))

    def _file(self, dotted: str, importer: str) -> Optional[str]:
        """The file of module `dotted` (`..utils.amp` relative to `importer`), when one matches."""
        if dotted.startswith("."):
            level = len(dotted) - len(dotted.lstrip("."))
            base = os.path.dirname(os.path.abspath(importer))
            for _ in range(level - 1):
                base = os.path.dirname(base)
            stem = os.path.join(base, *dotted.lstrip(".").split("."))
            found = [c for c in (stem + ".py", os.path.join(stem, "__init__.py")) if os.path.isfile(c)]
        else:
            parts = dotted.split(".")
            suffix = os.sep + os.sep.join(parts)
            stems = [s for s in self.by_tail.get(parts[-1], ()) if s.endswith(suffix)]
            found = [c for s in stems for c in (s + ".py", os.path.join(s, "__init__.py")) if os.path.isfile(c)]
        return found[0] if len(found) == 1 else None

    def reexport(self, importer: str) -> Reexport:
        """What a dotted name spelled in `importer` stands for, one project module deep."""

        def resolve(full: str) -> Optional[str]:
            module, _, name = full.rpartition(".")
            path = self._file(module, importer) if module.strip(".") else None
            tree = _tree(path) if path is not None else None
            if tree is None:
                return None
            return _imported(tree).get(name)

        return resolve


class _Uses:
    """Classifies the uses of the followed names in one file: `forced` counts the calls in a
    forced method, `unsafe` is set by any other use; `applying` collects the file's own
    undecorated module-level functions calling a followed name (own file only); `kinds` the
    `forcing` kinds of those calls. Another file's own module-level class, function or name
    spelled like a followed name (and not imported) is its own: its uses are not followed."""

    def __init__(self, tree: ast.Module, names: Set[str], function: str, own: bool, reexport: Optional[Reexport] = None) -> None:
        self.tree, self.names, self.function, self.own = tree, names, function, own
        self.parents = _parents(tree)
        self.imports = _imported(tree, relative=True)
        self.reexport = reexport
        self.forced = 0
        self.kinds: Set[str] = set()
        self.unsafe = False
        self.applying: Set[str] = set()
        self.shadowed = False
        if not own:
            defined = _defined(tree) - set(self.imports)
            self.shadowed = function in defined
            self.names = self.names - defined

    def _followed(self, node: ast.AST) -> bool:
        """`node` names one of the names: `N`, `<receiver>.N` (not `self.N`/`cls.N`: a method),
        or the Function's `F.apply`."""
        if isinstance(node, ast.Name):
            return node.id in self.names and isinstance(node.ctx, ast.Load)
        if isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Load):
            if node.attr == "apply" and isinstance(node.value, ast.Name) and node.value.id == self.function:
                return not self.shadowed
            receiver = node.value
            if isinstance(receiver, ast.Name) and receiver.id in ("self", "cls"):
                return False
            if isinstance(receiver, ast.Call) and isinstance(receiver.func, ast.Name) and receiver.func.id == "super":
                return False
            return node.attr in self.names
        return False

    def run(self) -> None:
        for node in ast.walk(self.tree):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                if any(a.asname and a.asname != a.name.rsplit(".", 1)[-1] and a.name.rsplit(".", 1)[-1] in self.names for a in node.names):
                    self.unsafe = True  # imported under another name: its uses are not followed
                continue
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in self.names:
                if not self._in_all(node):
                    self.unsafe = True  # a name held as a string (a registry, `getattr`)
                continue
            if not self._followed(node):
                continue
            parent = self.parents.get(id(node))
            if isinstance(node, ast.Name) and isinstance(parent, ast.Attribute) and parent.attr == "apply" and node.id == self.function:
                continue  # `F` of `F.apply`: the attribute is judged
            if self._inside_function_class(node):
                continue  # the Function's own methods (`F.apply` in a double backward)
            if self.own and self._alias(node, parent):
                continue
            if not (isinstance(parent, ast.Call) and parent.func is node):
                self.unsafe = True  # handed on as a value
                continue
            holder = _enclosing(parent, self.parents)
            kind = forcing(holder, self.parents, self.imports, self.reexport) if holder is not None else None
            if kind is not None:
                self.forced += 1
                self.kinds.add(kind)
            elif self.own and self._applying(holder):
                self.applying.add(holder.name)  # type: ignore[union-attr]
            else:
                self.unsafe = True

    def _in_all(self, node: ast.AST) -> bool:
        here = self.parents.get(id(node))
        while here is not None and not isinstance(here, (ast.Assign, ast.AugAssign, ast.stmt)):
            here = self.parents.get(id(here))
        targets = here.targets if isinstance(here, ast.Assign) else [here.target] if isinstance(here, ast.AugAssign) else []
        return any(isinstance(t, ast.Name) and t.id == "__all__" for t in targets)

    def _inside_function_class(self, node: ast.AST) -> bool:
        here = self.parents.get(id(node))
        while here is not None:
            if isinstance(here, ast.ClassDef) and here.name == self.function and self.own:
                return True
            here = self.parents.get(id(here))
        return False

    def _alias(self, node: ast.AST, parent: Optional[ast.AST]) -> bool:
        """`alias = F.apply` (or `= alias`) at the module's top level: the alias is followed."""
        if isinstance(parent, ast.Assign) and parent.value is node and parent in self.tree.body:
            if all(isinstance(t, ast.Name) for t in parent.targets):
                self.names.update(t.id for t in parent.targets)  # type: ignore[attr-defined]
                return True
        return False

    def _applying(self, holder: Optional[ast.AST]) -> bool:
        """An undecorated module-level function of the own file: its callers are followed."""
        return isinstance(holder, ast.FunctionDef) and holder in self.tree.body and not holder.decorator_list


def _defined(tree: ast.Module) -> Set[str]:
    """The names the module's top level binds by `class`, `def` or a plain assignment."""
    out: Set[str] = set()
    for stmt in tree.body:
        if isinstance(stmt, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            out.add(stmt.name)
        elif isinstance(stmt, ast.Assign):
            out.update(t.id for t in stmt.targets if isinstance(t, ast.Name))
    return out


def _flag_turned_on(listing: List[str]) -> bool:
    return any(_FLIPS.search(read_text(p) or "") for p in listing if p.endswith(".py"))


_answers: Dict[Tuple[str, str, str, int], bool] = {}


def forced_only(filename: str, function: str, root: Optional[str], may_run: Callable[[str], bool]) -> bool:
    """Every application of the project's Function `function` (a class of `filename`) runs in an
    mmcv `@force_fp32()` method of a module setting `fp16_enabled` or in a function decorated
    `@custom_fwd(cast_inputs=torch.float32)`, at least one does, and, for an mmcv one, the
    project turns the flag on (module docstring). `may_run(path)`: a low-precision autocast of
    the project may run that file's code; an unfollowed use in a file where it may not (a test on
    inputs it built) does not count. False when the project cannot be read whole. Without
    `root`, the applications are looked for in the whole checkout (the `.git` above the file),
    not only in the nearest packaging: a vendored package (MapTR's `mmdetection3d/`, with its
    own `setup.py`) has its Functions applied by the checkout's code around it; when that
    checkout cannot be read whole, the nearest packaging is read, as before."""
    base = project_root(filename, root)
    if base is None:
        return False
    listing = None
    if not root:
        from .embedded import checkout

        top = checkout(filename)
        if top is not None and top != base:
            listing = whole_listing(top, (".py", ".ipynb"))
            base = top if listing is not None else base
    if listing is None:
        listing = whole_listing(base, (".py", ".ipynb"))
    if listing is None:
        return False
    own = os.path.abspath(filename)
    key = (own, function, base, files_stamp(listing))
    if key not in _answers:
        if len(_answers) > 64:
            _answers.clear()
        _answers[key] = _forced_only(own, function, listing, may_run)
    return _answers[key]


def _own_uses(tree: ast.Module, function: str, reexport: Optional[Reexport] = None) -> Optional[_Uses]:
    """The uses of the Function in its own file, its aliases and applying functions followed to
    a fixpoint; None when one is not followed (or the chain is deeper than `_ROUNDS`)."""
    names = {function}
    for _ in range(_ROUNDS):
        uses = _Uses(tree, set(names), function, own=True, reexport=reexport)
        uses.run()
        if uses.unsafe:
            return None
        grown = uses.names | uses.applying
        if grown == names:
            return uses
        names = grown
    return None


def forced_in_file(source: str, function: str) -> bool:
    """The file alone shows `forced_only`: every use of its Function `function` is a call in a
    forced method of the file (none through a function of the file, whose callers may be
    elsewhere, nor through an alias), there is one, and, for an mmcv `@force_fp32()` one, the
    file turns `fp16_enabled` on (`wrap_fp16_model(model)`)."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return False
    uses = _own_uses(tree, function)
    # an alias (`f = _F.apply`) or an applying function may be called from other files
    if uses is None or uses.names != {function} or uses.forced == 0:
        return False
    return "mmcv" not in uses.kinds or _FLIPS.search(source) is not None


def _forced_only(own: str, function: str, listing: List[str], may_run: Callable[[str], bool]) -> bool:
    tree = _tree(own)
    if tree is None or not any(isinstance(s, ast.ClassDef) and s.name == function for s in tree.body):
        return False
    modules = _Modules(listing)
    mine = _own_uses(tree, function, modules.reexport(own))
    if mine is None:
        return False
    names, forced, kinds = mine.names | mine.applying, mine.forced, set(mine.kinds)
    others = [os.path.abspath(p) for p in listing if os.path.abspath(p) != own]
    words = re.compile(r"\b(?:" + "|".join(re.escape(n) for n in sorted(names)) + r")\b")
    for path in others:
        text = read_text(path)
        if text is None or not words.search(text):
            continue
        if path.endswith(".ipynb"):
            return False
        other = _tree(path)
        if other is None:
            return False
        uses = _Uses(other, set(names), function, own=False, reexport=modules.reexport(path))
        uses.run()
        if uses.unsafe and may_run(path):
            return False
        forced += uses.forced
        kinds |= uses.kinds
    # torch's `custom_fwd(cast_inputs=torch.float32)` needs no flag; mmcv's `force_fp32` does
    return forced > 0 and ("mmcv" not in kinds or _flag_turned_on(listing))
