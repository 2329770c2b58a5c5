"""Low-precision tensors carried into `autocast(enabled=False)` across calls (AMP204).

`autocast(enabled=False)` casts nothing back: a tensor an enabled region made in
fp16/bf16 stays so inside it. When the region is opened by a helper two calls
away, or in another file, only the project model sees both ends. The summary
records the two ends, the graph joins them along the call graph:

* `uses`: in a function that opens `autocast(enabled=False)` with no enabled
  region around it in its own body, each parameter used unchanged as an input
  of an op autocast would run in lower precision (`F.linear(h, w)`, `h @ w`,
  `torch.bmm`, `x.mm(w)`, or a callable the graph resolves, `self.head(h)`);
* `passed`: at a call, what each argument is: "lp" -- made by such an op in
  the same autocast region as the call (or, for a callable, {"m": [...]}) --
  or "p:NAME", a parameter of the caller passed on unchanged.
Uses only `ast`.
"""
from __future__ import annotations

import ast
from typing import Any, Dict, List, Optional, Sequence

from .. import torchapi
from . import masks
from .astutil import dotted, walk_expression

#: methods that keep the tensor's dtype (a view or a reshape of the parameter is still it)
_VIEWS = frozenset(("view", "reshape", "transpose", "permute", "contiguous", "t", "flatten", "unsqueeze", "squeeze", "expand", "expand_as", "view_as", "chunk", "split", "unbind"))


def disabled_alone(regions: Sequence[Dict[str, Any]], region: int) -> bool:
    """Region `region` is an `enabled=False` autocast with no region that may be enabled
    around it in the same function's file (the helper shape; nested ones are the per-file rule's)."""
    if region < 0 or regions[region].get("enabled") is not False or regions[region].get("via"):
        return False
    parent = regions[region]["parent"]
    while parent >= 0:
        if regions[parent].get("enabled") is not False:
            return False
        parent = regions[parent]["parent"]
    return True


def uses(s: Any, expr: ast.AST, params: Sequence[str], history: masks.History, region: int) -> List[Dict[str, Any]]:
    """Parameters used unchanged as inputs of lower-precision ops in `expr`."""
    assigned = history.by_name
    out: List[Dict[str, Any]] = []
    for n in walk_expression(expr):
        op, inputs = _op(s, n)
        if op is None:
            continue
        for arg in inputs:
            base = _strip(arg)
            if isinstance(base, ast.Name) and base.id in params and base.id not in assigned and base.id not in ("self", "cls"):
                end = base.end_col_offset or 0
                out.append({
                    "p": base.id, "op": op, "g": region,
                    "r": base.lineno, "c": s._column(base.lineno, base.col_offset),
                    "er": base.end_lineno or base.lineno, "ec": s._column(base.end_lineno or base.lineno, end),
                })
    return out


def passed(s: Any, arg: ast.AST, params: Sequence[str], history: masks.History, region: int, enabled: bool) -> Optional[Any]:
    """What an argument carries: "lp", {"m": callees}, "p:NAME", or None (nothing to follow).
    "lp" and callees only when `enabled` (the call sits in an autocast region that may be on, or
    in none of its file: the graph then asks who calls its function under autocast)."""
    base = _strip(arg)
    if isinstance(base, ast.Name):
        last = history.last(base.id)
        if last is None:
            return f"p:{base.id}" if base.id in params and base.id not in ("self", "cls") else None
        if not enabled or history.entries[last][2] != region:
            return None  # made before the region (fp32), or in another block
        found = masks.made_by(s, history, last)
    elif enabled:
        found = masks.source(s, base, history, len(history))
    else:
        return None
    return found if found == "lp" or isinstance(found, dict) else None


def _op(s: Any, n: ast.AST):
    """(op name, inputs) when `n` runs an op autocast lowers (or a callable to resolve)."""
    if isinstance(n, ast.BinOp) and isinstance(n.op, ast.MatMult):
        return "matmul", [n.left, n.right]
    if not isinstance(n, ast.Call):
        return None, ()
    spelled = dotted(n.func)
    q = s.qualname(spelled)
    args = [a for a in n.args if not isinstance(a, ast.Starred)]
    if q in torchapi.AUTOCAST_LOWER_PRECISION_FUNCS:
        return q.rsplit(".", 1)[-1], args
    if isinstance(n.func, ast.Attribute) and q is None and n.func.attr in torchapi.AUTOCAST_LOWER_PRECISION_METHODS:
        return n.func.attr, [n.func.value, *args]
    if spelled and q is None and spelled.startswith("self.") and spelled.count(".") == 1:
        return f"m:{spelled}", args  # `self.head(h)`: the graph resolves what `self.head` is
    return None, ()


def _strip(node: ast.AST) -> ast.AST:
    """`h`, for `h[0]`, `h.view(...)`, `h.transpose(1, 2)`."""
    while True:
        if isinstance(node, ast.Subscript):
            node = node.value
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in _VIEWS:
            node = node.func.value
        else:
            return node
