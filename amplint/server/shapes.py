"""What the per-file AMP model can link between one top-level statement and the
others, read with Python's `ast` (cheap) so the server's incremental re-lint
(`incremental.py`) can tell whether an edit inside one definition may change a
finding elsewhere, and which other definitions an excerpt of it must keep.

The model links top-level statements in a few ways only, and each has its
field here:
- names: a bare `f(...)` or `Base` resolves to a module-level function or a
  class of the file by name (`ModuleContext.callee`, class families), and a
  function's findings may depend on its callers (`ModuleContext.callers`);
- `self.m(...)`: the method `m` of the caller's class, or the only method of
  that name in the file;
- file-wide registries keyed by dotted name: GradScalers, optimizers (their
  constructors, `prepare`/`setup` results, the receivers of `.scale`,
  `.unscale_`, `.step` and `.step`'s argument, parameters named `*scaler*`, plain
  copies of those) and held autocast contexts;
- imports below the top level (resolved file-wide) and `global`/`nonlocal`;
- assignments: some rules look a name's assignments up file-wide
  (`ModuleContext.assignments_to(name)` without a scope).
Everything is over-approximated: a name in a string is not counted, but any
Name node is, whatever its scope.
"""
from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from typing import Dict, FrozenSet, Iterable, List, Optional, Set, Tuple

from ..engine.parallel import FACT_TRIGGERS

DEFINITIONS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
_FUNCTIONS = (ast.FunctionDef, ast.AsyncFunctionDef)

#: a call whose callee (imports resolved) matches this binds a registry key
_REGISTRY_CALL = re.compile(r"scaler|optim|autocast|(?:^|\.)(?:prepare|setup|initialize|setup_optimizers)$", re.I)
#: a method whose receiver (and, for `step`, first argument) the registries key on
_KEYED_METHODS = frozenset({"scale", "unscale_", "step"})
_SCALER_PARAM = "scaler"


@dataclass(frozen=True)
class Shape:
    """One top-level statement's links to the rest of the file (position-free)."""

    is_def: bool
    name: Optional[str]  # a definition's name
    function: Optional[str]  # a top-level function's name (a bare call elsewhere runs it)
    exported: FrozenSet[str]  # its own name, every class inside it (found by name), a class body's bindings
    methods: FrozenSet[str]  # the functions defined inside it (`self.m(...)` elsewhere may run one)
    bare: FrozenSet[str]  # every Name it reads or binds
    self_attrs: FrozenSet[str]  # every `self.X` it mentions
    registry: Tuple[str, ...]  # what it adds to the file-wide registries, as text (sorted, unique)
    keys: FrozenSet[str]  # the registry keys it binds or uses that way
    assigns: Tuple[Tuple[str, str], ...]  # (name, the binding as text): rules look some up file-wide
    imports: bool  # an import below the top level
    scoping: bool  # `global` / `nonlocal`
    facts_text: bool  # text a project fact needs (engine/parallel.FACT_TRIGGERS)


def dotted(node: ast.AST) -> Optional[str]:
    parts: List[str] = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return None
    parts.append(node.id)
    return ".".join(reversed(parts))


def aliases(tree: ast.Module) -> Dict[str, str]:
    """Names bound by imports (anywhere) and by module-level `X = a.b` -> what they stand for."""
    out: Dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                out[a.asname or a.name.split(".")[0]] = a.name if a.asname else a.name.split(".")[0]
        elif isinstance(node, ast.ImportFrom):
            for a in node.names:
                out[a.asname or a.name] = f"{node.module or ''}.{a.name}"
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            value = dotted(node.value)
            if value is not None:
                out.setdefault(node.targets[0].id, resolve(value, out))
    return out


def resolve(name: str, table: Dict[str, str]) -> str:
    head, _, rest = name.partition(".")
    full = table.get(head)
    return name if full is None else (f"{full}.{rest}" if rest else full)


def shape(node: ast.stmt, table: Dict[str, str], text: str) -> Shape:
    """`node`'s Shape; `table`: the file's aliases; `text`: its source (for the facts gate)."""
    exported: Set[str] = set()
    methods: Set[str] = set()
    bare: Set[str] = set()
    self_attrs: Set[str] = set()
    registry: List[str] = []
    keys: Set[str] = set()
    assigns: Set[Tuple[str, str]] = set()
    imports = scoping = False
    is_def = isinstance(node, DEFINITIONS)
    if is_def:
        exported.add(node.name)  # type: ignore[attr-defined]
    if isinstance(node, ast.ClassDef):
        exported |= _class_level_names(node)
    for n in ast.walk(node):
        if isinstance(n, ast.Name):
            bare.add(n.id)
        elif isinstance(n, ast.Attribute):
            if isinstance(n.value, ast.Name) and n.value.id == "self":
                self_attrs.add(n.attr)
        elif isinstance(n, ast.ClassDef):
            exported.add(n.name)
        elif isinstance(n, _FUNCTIONS):
            if n is not node:
                methods.add(n.name)
            params = [*n.args.posonlyargs, *n.args.args, *n.args.kwonlyargs, n.args.vararg, n.args.kwarg]
            for p in params:
                if p is not None and _SCALER_PARAM in p.arg.lower():
                    keys.add(p.arg)
                    registry.append(f"param {p.arg}")
        elif isinstance(n, (ast.Import, ast.ImportFrom)):
            imports = imports or n is not node
        elif isinstance(n, (ast.Global, ast.Nonlocal)):
            scoping = True
        elif isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr in _KEYED_METHODS:
            # `.scale`/`.unscale_` receivers are GradScalers; the first argument of `.step`/`.unscale_`
            # on one is an optimizer: what they add is a key, however often they are called
            receiver = dotted(n.func.value)
            if receiver is not None:
                keys.add(receiver)
                if n.func.attr != "step":
                    registry.append(f"scaler {receiver}")
                arg = dotted(n.args[0]) if n.args and n.func.attr != "scale" else None
                if arg is not None:
                    keys.add(arg)
                    registry.append(f"optimizer {arg}")
        if isinstance(n, (ast.Assign, ast.AnnAssign, ast.AugAssign, ast.NamedExpr)) and n.value is not None:
            targets = n.targets if isinstance(n, ast.Assign) else [n.target]
            binding = ast.dump(n)
            assigns.update((name, binding) for name in _target_names(targets))
            if _binds_registry(n.value, table):
                names = _target_names(targets)
                keys.update(names)
                registry.append(ast.dump(n))
            elif dotted(n.value) is not None:
                registry.append(f"copy {ast.dump(n)}")  # a copy counts when its source is a key
    return Shape(
        is_def=is_def,
        name=node.name if is_def else None,  # type: ignore[attr-defined]
        function=node.name if isinstance(node, _FUNCTIONS) else None,
        exported=frozenset(exported),
        methods=frozenset(methods),
        bare=frozenset(bare),
        self_attrs=frozenset(self_attrs),
        registry=tuple(sorted(set(registry))),  # a set: the registries merge repeated entries
        keys=frozenset(keys),
        assigns=tuple(sorted(assigns)),
        imports=imports,
        scoping=scoping,
        facts_text=any(t in text for t in FACT_TRIGGERS),
    )


def _class_level_names(node: ast.ClassDef) -> Set[str]:
    """Names a class body binds outside its methods: the per-file model has no class scope,
    so `x = ...` there reads as a module-level binding of `x`."""
    out: Set[str] = set()
    todo: List[ast.AST] = list(node.body)
    while todo:
        n = todo.pop()
        if isinstance(n, _FUNCTIONS):
            continue
        if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store):
            out.add(n.id)
        todo.extend(ast.iter_child_nodes(n))
    return out


def _binds_registry(value: ast.AST, table: Dict[str, str]) -> bool:
    for n in ast.walk(value):
        if isinstance(n, ast.Call):
            callee = dotted(n.func)
            if callee is not None and _REGISTRY_CALL.search(resolve(callee, table)):
                return True
    return False


def _target_names(targets: Iterable[ast.AST]) -> Set[str]:
    out: Set[str] = set()
    for t in targets:
        for n in ast.walk(t):
            name = dotted(n) if isinstance(n, (ast.Name, ast.Attribute)) else None
            if name is not None:
                out.add(name)
    return out


def registry_of(s: Shape, keys: FrozenSet[str]) -> Tuple[str, ...]:
    """What `s` adds to the registries given the file's keys: copies count only from a key."""
    out = []
    for entry in s.registry:
        if entry.startswith("copy "):
            if not any(f"id='{k.split('.')[0]}'" in entry for k in keys):
                continue
        out.append(entry)
    return tuple(out)
