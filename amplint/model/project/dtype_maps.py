"""What a property (or method) mapping a precision setting to torch dtypes returns, with `ast` only.

Configs and trainers often pick a dtype in a property of their class (allenai/OLMo's
`autocast_precision`: `if self.precision == "amp_bf16": return torch.bfloat16 elif self.precision
== "amp_fp16": return torch.float16 ... raise ValueError(...)`). Two readers ask about that shape:
AMP105's condition (`model/dtype_properties.py`: does every definition of the name an autocast
reads return only dtype literals, float16 among them) and AMP803's scale summary
(`scale._Reader.dtype_mapping`: which values of the setting make the FSDP policy's own property
pick float16). `read_dtype_map` reads one definition for both: its kind, the dtypes its returns
spell and, where its body is an if/elif chain comparing one `self.` setting with string literals,
{setting value: dtype} with the row of each value's `return`.
"""
from __future__ import annotations

import ast
from typing import Callable, Dict, FrozenSet, List, NamedTuple, Optional

from ..torchapi import dtype_of_qualname
from .astutil import dotted

#: the decorators that make a `def` read as an attribute
PROPERTIES = frozenset(("property", "cached_property", "functools.cached_property"))


class DtypeMap(NamedTuple):
    """A definition returning only torch dtype literals."""

    #: "property" (`@property`, `cached_property`), "method" (no decorator) or "decorated" (another)
    kind: str
    #: whether it takes more than `self` (a method called `cfg.amp_dtype()` takes nothing)
    arguments: bool
    #: every dtype its `return`s spell ('fp16', 'bf16', 'fp32'), not empty
    dtypes: FrozenSet[str]
    #: the `self.` attribute its if/elif chain compares (`precision`, `cfg.precision`); None when
    #: the body is not that chain (every branch one `return <dtype>` or `raise`)
    setting: Optional[str]
    #: {setting value: dtype} by that chain, in source order (the first test a value meets wins)
    values: Dict[str, str]
    #: {setting value: the row of the `return` it picks}
    rows: Dict[str, int]


def spelled_dtype(node: ast.AST) -> Optional[str]:
    """'fp16' | 'bf16' | 'fp32' for a dtype spelled by its torch name (`torch.float16`), else None."""
    return dtype_of_qualname(dotted(node))


def read_dtype_map(
    func: ast.AST, dtype_of: Callable[[ast.AST], Optional[str]] = spelled_dtype
) -> Optional[DtypeMap]:
    """`func` (a `def`) read as a dtype mapping, each dtype literal read by `dtype_of`; None when
    one of its returns is anything but dtype literals (a conditional expression of them, a dict
    literal of them subscripted), it yields, or it returns nothing."""
    dtypes = _returned_dtypes(func, dtype_of)
    if dtypes is None:
        return None
    is_property = any(dotted(d) in PROPERTIES for d in func.decorator_list)
    kind = "property" if is_property else "decorated" if func.decorator_list else "method"
    chain = _chain(func.body, dtype_of)
    setting, values, rows = chain if chain is not None else (None, {}, {})
    return DtypeMap(kind, _takes_arguments(func), dtypes, setting, values, rows)


def _takes_arguments(func: ast.AST) -> bool:
    a = func.args
    return len(a.posonlyargs) + len(a.args) != 1 or bool(a.kwonlyargs) or a.vararg is not None or a.kwarg is not None


def _returned_dtypes(func: ast.AST, dtype_of) -> Optional[FrozenSet[str]]:
    """The dtypes the function's `return`s spell (not those of nested functions); None when one
    returns anything else, or it returns nothing."""
    out: set = set()
    stack: List[ast.AST] = list(func.body)
    returned = False
    while stack:
        node = stack.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)):
            continue
        if isinstance(node, ast.Return):
            returned = True
            dtypes = _literal_dtypes(node.value, dtype_of)
            if dtypes is None:
                return None
            out |= dtypes
            continue
        if isinstance(node, (ast.Yield, ast.YieldFrom)):
            return None
        stack.extend(ast.iter_child_nodes(node))
    return frozenset(out) if returned and out else None


def _literal_dtypes(node: Optional[ast.AST], dtype_of) -> Optional[FrozenSet[str]]:
    if node is None:
        return None
    dtype = dtype_of(node)
    if dtype is not None:
        return frozenset((dtype,))
    if isinstance(node, ast.IfExp):
        a, b = _literal_dtypes(node.body, dtype_of), _literal_dtypes(node.orelse, dtype_of)
        return a | b if a is not None and b is not None else None
    if isinstance(node, ast.Subscript) and isinstance(node.value, ast.Dict) and node.value.values:
        out: set = set()
        for v in node.value.values:
            d = _literal_dtypes(v, dtype_of)
            if d is None:
                return None
            out |= d
        return frozenset(out)
    return None


def _chain(stmts: List[ast.stmt], dtype_of):
    """(setting, {value: dtype}, {value: row}) for a body (its docstring apart) that is `if`s
    comparing one `self.` setting with string literals (`==`, `in` a tuple, list or set of them),
    each branch one `return <dtype>` or `raise`, ending in one such statement; None otherwise."""
    body = list(stmts)
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
        body = body[1:]  # the docstring
    setting: Optional[str] = None
    values: Dict[str, str] = {}
    rows: Dict[str, int] = {}
    while body:
        stmt = body[0]
        if not isinstance(stmt, ast.If):
            if len(body) != 1 or _branch(body, dtype_of) is None:
                return None
            break
        test = stmt.test
        if not (isinstance(test, ast.Compare) and len(test.ops) == 1):
            return None
        spelled = dotted(test.left)
        if not spelled or not spelled.startswith("self.") or setting not in (None, spelled):
            return None
        setting = spelled
        picked = _compared_strings(test.ops[0], test.comparators[0])
        got = _branch(stmt.body, dtype_of)
        if picked is None or got is None:
            return None
        if got != "raise":
            for value in picked:
                if value not in values:
                    values[value] = got
                    rows[value] = stmt.body[0].lineno
        body = list(stmt.orelse) + body[1:]
    if setting is None:
        return None
    return setting[len("self."):], values, rows


def _compared_strings(op: ast.cmpop, right: ast.AST) -> Optional[List[str]]:
    if isinstance(op, ast.Eq) and isinstance(right, ast.Constant) and isinstance(right.value, str):
        return [right.value]
    if isinstance(op, ast.In) and isinstance(right, (ast.Tuple, ast.List, ast.Set)):
        out = [e.value for e in right.elts if isinstance(e, ast.Constant) and isinstance(e.value, str)]
        return out if len(out) == len(right.elts) else None
    return None


def _branch(stmts: List[ast.stmt], dtype_of) -> Optional[str]:
    """The dtype a branch returns ('fp16'...), 'raise', or None when it is not one statement doing either."""
    if len(stmts) != 1:
        return None
    if isinstance(stmts[0], ast.Raise):
        return "raise"
    if isinstance(stmts[0], ast.Return) and stmts[0].value is not None:
        return dtype_of(stmts[0].value)
    return None
