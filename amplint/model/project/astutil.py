"""Small `ast` readers shared by the summary and its mask sites (no libcst)."""
from __future__ import annotations

import ast
from typing import Dict, Iterator, List, Optional, Tuple

from ...core.pyast import statements


def dotted(node: Optional[ast.AST]) -> Optional[str]:
    """`a.b.c` for a Name/Attribute chain, else None."""
    cls = node.__class__
    if cls is _NAME:
        return node.id  # type: ignore[union-attr]
    if cls is not _ATTRIBUTE:
        return None
    parts: List[str] = []
    while node.__class__ is _ATTRIBUTE:
        parts.append(node.attr)  # type: ignore[union-attr]
        node = node.value  # type: ignore[union-attr]
    if node.__class__ is _NAME:
        parts.append(node.id)  # type: ignore[union-attr]
        parts.reverse()
        return ".".join(parts)
    return None


_NAME, _ATTRIBUTE = ast.Name, ast.Attribute


def number(node: ast.AST) -> Optional[float]:
    """The value of `1e-8`, `-1e9`; None for anything else."""
    sign = 1.0
    while isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        sign = -sign if isinstance(node.op, ast.USub) else sign
        node = node.operand
    if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)) and not isinstance(node.value, bool):
        return sign * float(node.value)
    return None


#: fields that never hold a node worth yielding: names and flags (str, int), and the context
#: and operator singletons (`Load`, `Add`, `Eq`, ...), which no reader of an expression looks at
#: as a node of its own (they read `node.ctx`, `node.op` off the node holding them)
_NOT_CHILDREN = frozenset(("ctx", "op", "ops", "id", "attr", "arg", "kind", "conversion", "is_async", "type_comment"))
#: per node class, the fields that may hold child nodes (`Constant.value` is a plain value)
_CHILD_FIELDS: Dict[type, Tuple[str, ...]] = {ast.Constant: ()}


def _child_fields(cls: type) -> Tuple[str, ...]:
    fields = _CHILD_FIELDS[cls] = tuple(f for f in cls._fields if f not in _NOT_CHILDREN)  # type: ignore[attr-defined]
    return fields


def walk_expression(expr: ast.AST) -> Iterator[ast.AST]:
    """The nodes of an expression in preorder, not descending into lambdas (they run later,
    elsewhere), nor yielding the context and operator singletons (`Load`, `Add`: see
    `_NOT_CHILDREN`). Children are read off each class's child fields, listed once per class
    (`ast.iter_child_nodes`, a generator over `ast.iter_fields`, was most of the cost of
    summarising a big file; then reading every field of every node)."""
    stack = [expr]
    pop, push, extend = stack.pop, stack.append, stack.extend
    known = _CHILD_FIELDS
    lam = ast.Lambda
    while stack:
        node = pop()
        cls = node.__class__
        if cls is lam:
            continue
        yield node
        fields = known.get(cls)
        if fields is None:
            fields = _child_fields(cls)
        if not fields:
            continue
        if len(fields) == 1:
            value = getattr(node, fields[0], None)
            if value is None:
                continue
            if value.__class__ is list:
                extend([v for v in reversed(value) if v is not None])
            else:
                push(value)
            continue
        children: List[ast.AST] = []
        for field in fields:
            value = getattr(node, field, None)
            if value is None:
                continue
            if value.__class__ is list:
                children.extend([v for v in value if v is not None])
            else:
                children.append(value)
        children.reverse()
        extend(children)


def imports(body: List[ast.stmt]) -> Iterator[ast.AST]:
    """Every `import`/`from ... import` statement in `body` and the bodies nested in it, in the
    order `ast.walk` meets them (breadth first), so the first binding of a name stays the same."""
    return (node for node in statements(body) if isinstance(node, (ast.Import, ast.ImportFrom)))


def import_bindings(body: List[ast.stmt]) -> Tuple[Dict[str, List[object]], List[ast.ImportFrom]]:
    """What the imports in `body` bind, as the project summaries store it: name -> [level,
    module, imported name] (`import a.b` binds `a`; `import a.b as c` binds `c` to `a.b`), the
    first binding of a name kept; and the `from m import *` statements, which bind no name here."""
    table: Dict[str, List[object]] = {}
    stars: List[ast.ImportFrom] = []
    for node in imports(body):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.asname:
                    table.setdefault(alias.asname, [0, alias.name, ""])
                else:
                    root = alias.name.split(".")[0]
                    table.setdefault(root, [0, root, ""])
        elif isinstance(node, ast.ImportFrom):
            for alias in node.names:
                if alias.name == "*":
                    stars.append(node)
                else:
                    table.setdefault(alias.asname or alias.name, [node.level or 0, node.module or "", alias.name])
    return table, stars
