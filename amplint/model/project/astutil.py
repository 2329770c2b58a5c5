"""Small `ast` readers shared by the summary and its mask sites (no libcst)."""
from __future__ import annotations

import ast
from typing import Iterator, List, Optional


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
    """The nodes of an expression, not descending into lambdas (they run later, elsewhere)."""
    stack = [expr]
    while stack:
        node = stack.pop()
        if isinstance(node, ast.Lambda):
            continue
        yield node
        stack.extend(reversed(list(ast.iter_child_nodes(node))))
