"""Reading literal values and arguments off libcst nodes (no model needed)."""
from __future__ import annotations

import ast
import math
import struct
from typing import Any, Callable, Iterator, Optional, Union

import libcst as cst


# --------------------------------------------------------------------------- helpers


def evaluated(node: Union[cst.Integer, cst.Float, cst.SimpleString]) -> Any:
    """`node.evaluated_value`, without `ast.literal_eval`: its nested functions refer to each
    other, a reference cycle per call (CPython 3.11) that only the cycle collector frees, and the
    collector is paused while a file is analysed (`engine.gc_paused`): two per AMP301 site stayed
    until the file was done (a 140,000-line AMP-dense file: hundreds of MB). A number's value is
    what the compiler makes of its literal (`int(text, 0)`, `float(text)`: the same conversions);
    a string's is its constant, parsed as `literal_eval` parses it. Raises ValueError (or
    SyntaxError) where `evaluated_value` would."""
    text = node.value
    if isinstance(node, cst.Integer):
        return int(text, 0)
    if isinstance(node, cst.Float):
        return float(text)
    body = ast.parse(text.lstrip(" \t"), mode="eval").body
    if not isinstance(body, ast.Constant):
        raise ValueError(f"not a literal: {text!r}")
    return body.value


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
        value = evaluated(node)
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
            return sign * float(evaluated(node))
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


# --------------------------------------------------------------------------- constant folding


def folded_number(node: Optional[cst.CSTNode], constant: Optional[Callable[[str], Optional[float]]] = None, depth: int = 0) -> Optional[float]:
    """The value of a constant arithmetic expression (`1 - 1e-4`, `2 ** -14`, `(1.0 - EPS)`):
    number literals, `+ - * / **`, unary signs and parentheses; a plain name counts when
    `constant(name)` gives its value (a module constant). None for anything else."""
    if node is None or depth > 8:
        return None
    value = literal_number(node)
    if value is not None:
        return value
    if isinstance(node, cst.Name):
        return constant(node.value) if constant is not None else None
    if isinstance(node, cst.UnaryOperation) and isinstance(node.operator, (cst.Minus, cst.Plus)):
        inner = folded_number(node.expression, constant, depth + 1)
        if inner is None:
            return None
        return -inner if isinstance(node.operator, cst.Minus) else inner
    if isinstance(node, cst.BinaryOperation):
        left = folded_number(node.left, constant, depth + 1)
        right = folded_number(node.right, constant, depth + 1) if left is not None else None
        if left is None or right is None:
            return None
        op = node.operator
        try:
            if isinstance(op, cst.Add):
                return left + right
            if isinstance(op, cst.Subtract):
                return left - right
            if isinstance(op, cst.Multiply):
                return left * right
            if isinstance(op, cst.Divide):
                return left / right
            if isinstance(op, cst.Power):
                result = left ** right
                return result if isinstance(result, float) or isinstance(result, int) else None
        except (ZeroDivisionError, OverflowError, ValueError):
            return None
    return None


def in_fp16(value: float) -> float:
    """`value` rounded to the nearest fp16 (round half to even, as a cast does): 1 - 1e-4 is
    1.0, 1e-8 is 0.0, 70000.0 is inf."""
    try:
        return float(struct.unpack("<e", struct.pack("<e", value))[0])
    except OverflowError:
        return math.copysign(math.inf, value)


def module_numbers(ctx: Any) -> "dict[str, float]":
    """Module-level names of a file's context assigned one number, only ever (`EPS = 1e-7`,
    `GRADIENT_ACCUMULATE_EVERY = 4`): the constants `folded_number` may read. Kept on the
    context, so every rule asking about the same file reads its assignments once."""
    cached = ctx.__dict__.get("_module_numbers")
    if cached is None:
        found: "dict[str, Optional[float]]" = {}
        for a in ctx.assignments:
            if "." in a.target:
                continue
            value = literal_number(a.value) if a.scope.is_module and not a.unpacked else None
            if a.target in found and found[a.target] != value:
                value = None
            found[a.target] = value
        cached = ctx.__dict__["_module_numbers"] = {k: v for k, v in found.items() if v is not None}
    return cached
