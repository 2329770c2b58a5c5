"""Reading literal values and arguments off libcst nodes (no model needed)."""
from __future__ import annotations

from typing import Iterator, Optional

import libcst as cst


# --------------------------------------------------------------------------- helpers


def call_arg(call: cst.Call, position: Optional[int], keyword: Optional[str] = None) -> Optional[cst.BaseExpression]:
    index = 0
    for arg in call.args:
        if arg.keyword is not None:
            if keyword is not None and arg.keyword.value == keyword:
                return arg.value
            continue
        if arg.star:
            return None  # *args: positions after it are unknowable
        if position is not None and index == position:
            return arg.value
        index += 1
    return None


def literal_bool(node: Optional[cst.CSTNode]) -> Optional[bool]:
    if isinstance(node, cst.Name) and node.value in ("True", "False"):
        return node.value == "True"
    return None


def literal_string(node: Optional[cst.CSTNode]) -> Optional[str]:
    if isinstance(node, cst.SimpleString):
        value = node.evaluated_value
        return value if isinstance(value, str) else None
    return None


def literal_number(node: Optional[cst.CSTNode]) -> Optional[float]:
    """The value of `1e9`, `-1e9`, `+5`, `10_000`; None for anything else."""
    sign = 1.0
    while isinstance(node, cst.UnaryOperation) and isinstance(node.operator, (cst.Minus, cst.Plus)):
        if isinstance(node.operator, cst.Minus):
            sign = -sign
        node = node.expression
    if isinstance(node, (cst.Float, cst.Integer)):
        try:
            return sign * float(node.evaluated_value)
        except (ValueError, OverflowError):
            return None
    return None


def call_chain(expr: cst.CSTNode) -> Iterator[cst.Call]:
    """`a.b().c().d()` yields the calls d(), c(), b() (outermost first)."""
    while True:
        if isinstance(expr, cst.Call):
            yield expr
            expr = expr.func
        elif isinstance(expr, cst.Attribute):
            expr = expr.value
        else:
            return
