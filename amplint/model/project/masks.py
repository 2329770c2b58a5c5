"""Overflowing mask constants in a file's summary (AMP301 across functions and files).

A `-1e9` fill or additive mask only breaks where the tensor it meets is fp16,
and in a model file that is decided elsewhere: the trainer's autocast, a
held `partial(torch.autocast, ...)`, a project decorator, a framework's
precision flag. The summary records, per function, each such constant with
what the tensor it meets is made of, so the project model can tell whether
that tensor is an autocast output under an fp16 region:

* "lp" -- an op autocast runs in lower precision made it (`q @ k`, `torch.matmul`,
  `F.linear`, `x.bmm(y)`), seen through the function's earlier assignments;
* {"m": [spellings]} -- a callable the project model must resolve made it
  (`self.qkv(x)`: an `nn.Linear` held in an attribute);
* anything cast to fp32 (`.float()`) or bf16, or a parameter nothing in the
  function computes, is not recorded (precision first, as in the per-file rule).

Functions that test a dtype (`if x.dtype == torch.float16`, `-1e4 if ... else -1e9`)
record nothing: their constants are dtype-aware. Uses only `ast`.
"""
from __future__ import annotations

import ast
import bisect
from typing import Any, Dict, List, Optional, Sequence, Tuple, Union

from .. import torchapi
from .astutil import dotted as _dotted, number as _number, walk_expression as _walk

FP16_MAX = 65504.0
#: method -> (position, keyword) of the fill value; these raise on an fp16 tensor
_FILL_METHODS = {
    "masked_fill": (1, "value"),
    "masked_fill_": (1, "value"),
    "fill_": (0, "value"),
    "index_fill": (2, "value"),
    "index_fill_": (2, "value"),
}
#: qualified function -> (position, keyword) of the fill value, position of the tensor
_FILL_FUNCTIONS = {"torch.masked_fill": (2, "value", 0), "torch.full_like": (1, "fill_value", 0)}
_DTYPE_WORDS = ("dtype", "float16", "half", "fp16", "bf16", "bfloat16", "finfo", "autocast", "is_floating_point")
_MAX_DEPTH = 4

Source = Union[str, Dict[str, List[str]], None]


class History:
    """A function's plain assignments so far, in order: (name, value, autocast region index at
    the assignment), with each name's positions, so "the last assignment of `x` before entry i"
    is a bisection, and what made each value is read once."""

    def __init__(self) -> None:
        self.entries: List[Tuple[str, ast.AST, int]] = []
        self.by_name: Dict[str, List[int]] = {}
        self.sources: Dict[int, Source] = {}

    def add(self, name: str, value: ast.AST, region: int) -> None:
        self.by_name.setdefault(name, []).append(len(self.entries))
        self.entries.append((name, value, region))

    def last(self, name: str, before: Optional[int] = None) -> Optional[int]:
        """The position of the last assignment of `name` before entry `before` (default: all)."""
        positions = self.by_name.get(name)
        if not positions:
            return None
        i = bisect.bisect_left(positions, len(self.entries) if before is None else before) - 1
        return positions[i] if i >= 0 else None

    def __len__(self) -> int:
        return len(self.entries)


def dtype_aware(body: Sequence[ast.stmt]) -> bool:
    """Whether a function body tests a dtype anywhere (`if`, `while` or a conditional expression)."""
    for stmt in body:
        for node in ast.walk(stmt):
            test = getattr(node, "test", None) if isinstance(node, (ast.If, ast.IfExp, ast.While, ast.Assert)) else None
            if test is not None:
                dumped = ast.dump(test)  # once, not once a word
                if any(w in dumped for w in _DTYPE_WORDS):
                    return True
    return False


def sites(s: Any, node: ast.AST, history: History, constants: History, region: int, target: Optional[ast.AST] = None) -> List[Dict[str, Any]]:
    """The overflowing mask constants in one statement's expression `node` (`target`: the
    target of an augmented assignment `x += m * -1e9`). `history`: the function's (name,
    value) assignments so far; `constants`: the module's."""
    out: List[Dict[str, Any]] = []
    if target is not None:
        found = _scaled_literal(node)
        if found is not None:
            out.extend(_site(s, found, "additive", False, target, history, region))
    for n in _walk(node):
        if isinstance(n, ast.Call):
            out.extend(_fill(s, n, history, constants, region))
        elif isinstance(n, ast.BinOp) and isinstance(n.op, (ast.Add, ast.Sub)):
            for mask, other in ((n.right, n.left), (n.left, n.right)):
                found = _scaled_literal(mask)
                if found is not None and _number(other) is None:
                    out.extend(_site(s, found, "additive", False, other, history, region))
    return out


def _fill(s: Any, call: ast.Call, history: History, constants: History, region: int) -> List[Dict[str, Any]]:
    func = call.func
    spelled = _dotted(func)
    q = s.qualname(spelled)
    if isinstance(func, ast.Attribute) and q is None and func.attr in _FILL_METHODS:
        position, keyword = _FILL_METHODS[func.attr]
        value, tensor, op, raises = _arg(call, position, keyword), func.value, func.attr, True
    elif q in _FILL_FUNCTIONS:
        position, keyword, at = _FILL_FUNCTIONS[q]
        value, tensor, op, raises = _arg(call, position, keyword), _arg(call, at, "input"), q[len("torch."):], True
    elif q == "torch.where":
        value, tensor, op, raises = _arg(call, 1, "input"), _arg(call, 2, "other"), "torch.where", False
    elif isinstance(func, ast.Attribute) and q is None and func.attr == "where":
        value, tensor, op, raises = _arg(call, 1, "other"), func.value, "where", False
    else:
        return []
    if value is None or tensor is None:
        return []
    literal = value
    if isinstance(value, ast.Name):  # `NEG_INF = -1e9` at module level, passed by name
        bound = [constants.entries[i][1] for i in constants.by_name.get(value.id, ())]
        if not bound or value.id in history.by_name or len({_number(v) for v in bound}) != 1:
            return []
        literal = bound[0]
    number = _number(literal)
    if number is None or abs(number) <= FP16_MAX or (not raises and _is_integer(literal)):
        return []
    return _site(s, (value, number, literal), op, raises, tensor, history, region)


def _site(s: Any, found: Tuple[ast.AST, float, ast.AST], op: str, raises: bool, tensor: ast.AST, history: History, region: int) -> List[Dict[str, Any]]:
    node, number, literal = found
    src = source(s, tensor, history, len(history))
    if src is None or src in ("fp32", "other"):
        return []
    text = ast.get_source_segment(s.source, literal) if hasattr(literal, "lineno") else None
    end_row = getattr(node, "end_lineno", None) or node.lineno  # type: ignore[attr-defined]
    return [{
        "r": node.lineno,  # type: ignore[attr-defined]
        "c": s._column(node.lineno, node.col_offset),  # type: ignore[attr-defined]
        "er": end_row,
        "ec": s._column(end_row, getattr(node, "end_col_offset", 0) or 0),
        "g": region,
        "v": number,
        "t": (text or repr(number))[:24],
        "op": op,
        "raises": 1 if raises else 0,
        "x": (_dotted(tensor) or "")[:40],
        "src": src,
    }]


def source(s: Any, expr: ast.AST, history: History, before: int, depth: int = 0) -> Source:
    """What made `expr` ("lp", "fp32", "other", {"m": callees to resolve}, or None: unknown),
    reading the assignments `history[:before]` for names."""
    if depth > _MAX_DEPTH:
        return None
    top = expr
    while isinstance(top, ast.Subscript):
        top = top.value
    if isinstance(top, ast.Call) and _integer_result(s, top):
        return "other"  # indices or a bool mask: whatever made its input, not a floating value
    if isinstance(top, ast.Call) and isinstance(top.func, ast.Attribute):
        attr = top.func.attr
        if attr in ("float", "double"):
            return "fp32"
        if attr in ("half", "bfloat16", "to", "type"):
            tag = s._method_tag(top)
            if tag == "to:fp16":
                return "lp"
            if tag in ("to:fp32", "to:bf16"):
                return "fp32" if tag == "to:fp32" else "other"
    callees: List[str] = []
    for n in _walk(expr):
        if isinstance(n, ast.BinOp) and isinstance(n.op, ast.MatMult):
            return "lp"
        if isinstance(n, ast.Call):
            spelled = _dotted(n.func)
            q = s.qualname(spelled)
            if q in torchapi.AUTOCAST_LOWER_PRECISION_FUNCS:
                return "lp"
            if isinstance(n.func, ast.Attribute) and q is None and n.func.attr in torchapi.AUTOCAST_LOWER_PRECISION_METHODS:
                return "lp"
            if spelled and q is None and spelled not in callees:
                callees.append(spelled)  # `self.qkv(x)`: the project model resolves it
        elif isinstance(n, ast.Name):
            i = history.last(n.id, before)
            if i is not None:
                inner = made_by(s, history, i, depth + 1)
                if inner == "lp":
                    return "lp"
                if isinstance(inner, dict):
                    callees.extend(c for c in inner["m"] if c not in callees)
    return {"m": callees[:6]} if callees else None


def _integer_result(s: Any, call: ast.Call) -> bool:
    """`F.one_hot(idx)`, `torch.argmax(x)`, `x.argmax(-1)`, `m.bool()`: an integer or bool tensor."""
    q = s.qualname(_dotted(call.func))
    if q in torchapi.INTEGER_RESULT_FUNCS:
        return True
    return q is None and isinstance(call.func, ast.Attribute) and call.func.attr in torchapi.INTEGER_RESULT_METHODS


def made_by(s: Any, history: History, i: int, depth: int = 0) -> Source:
    """What made the value of assignment `i` (`source`, memoised per assignment)."""
    if i in history.sources:
        return history.sources[i]
    found = source(s, history.entries[i][1], history, i, depth)
    if depth == 0 or found is not None:
        history.sources[i] = found
    return found


def _scaled_literal(node: ast.AST) -> Optional[Tuple[ast.AST, float, ast.AST]]:
    """(literal, value, literal) for `m * -1e9` / `-1e9 * m` with a big float constant."""
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mult):
        for lit, other in ((node.right, node.left), (node.left, node.right)):
            number = _number(lit)
            if number is not None and abs(number) > FP16_MAX and not _is_integer(lit) and _number(other) is None:
                return lit, number, lit
    return None


def _arg(call: ast.Call, position: Optional[int], keyword: str) -> Optional[ast.AST]:
    for k in call.keywords:
        if k.arg == keyword:
            return k.value
    if position is None or any(isinstance(a, ast.Starred) for a in call.args[: position + 1]):
        return None
    return call.args[position] if position < len(call.args) else None




def _is_integer(node: ast.AST) -> bool:
    while isinstance(node, ast.UnaryOp):
        node = node.operand
    return isinstance(node, ast.Constant) and isinstance(node.value, int)



