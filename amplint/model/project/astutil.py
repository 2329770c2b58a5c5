"""Small `ast` readers shared by the summary and its mask sites (no libcst)."""
from __future__ import annotations

import ast
from typing import Iterator, List, Optional

from ...core.pyast import statements


def dotted(node: Optional[ast.AST]) -> Optional[str]:
    """`a.b.c` for a Name/Attribute chain, else None."""
    parts: List[str] = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
        return ".".join(reversed(parts))
    return None


def number(node: ast.AST) -> Optional[float]:
    """The value of `1e-8`, `-1e9`; None for anything else."""
    sign = 1.0
    while isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        sign = -sign if isinstance(node.op, ast.USub) else sign
        node = node.operand
    if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)) and not isinstance(node.value, bool):
        return sign * float(node.value)
    return None


def walk_expression(expr: ast.AST) -> Iterator[ast.AST]:
    """The nodes of an expression in preorder, not descending into lambdas (they run later,
    elsewhere). Children are read off each class's `_fields` directly: `ast.iter_child_nodes`
    (a generator over `ast.iter_fields`) was most of the cost of summarising a big file."""
    stack = [expr]
    pop, push = stack.pop, stack.append
    while stack:
        node = pop()
        if node.__class__ is ast.Lambda:
            continue
        yield node
        children: List[ast.AST] = []
        for field in node._fields:
            value = getattr(node, field, None)
            if isinstance(value, ast.AST):
                children.append(value)
            elif value.__class__ is list:
                children.extend(v for v in value if isinstance(v, ast.AST))
        while children:
            push(children.pop())


def imports(body: List[ast.stmt]) -> Iterator[ast.AST]:
    """Every `import`/`from ... import` statement in `body` and the bodies nested in it, in the
    order `ast.walk` meets them (breadth first), so the first binding of a name stays the same."""
    return (node for node in statements(body) if isinstance(node, (ast.Import, ast.ImportFrom)))
