"""fp32 upcasts that only feed ops autocast lowers, in a file's summary (AMP203 across files).

`xq = xq.to(torch.float)` before `F.scaled_dot_product_attention(xq, ...)` is undone
when the function runs under a low-precision autocast: the op casts its inputs back.
In a model file the autocast is entered elsewhere (a trainer's `model_forward`), so
the summary records, per function, each fp32 cast whose copy is read only as an input
of such ops (through views: `transpose`, `contiguous`, subscripts, a scaling `/ s`)
or for its metadata (`.dtype`, `.shape`, `.size()`); the project model decides
whether a low-precision autocast reaches the function (`Project.autocast_witnesses`).

A site records:

* "r", "c", "er", "ec": the cast; "t": its text;
* "ops": [aten op, shown name] of the ops its copy feeds (the project checks them
  against the witness's device: `einsum` is lowered on CUDA only);
* "mu": `self.fc`-like callables it is passed to, which the project must resolve to a
  torch module autocast lowers (`Project.lowers`), every one of them;
* "src": what made the cast's receiver, so it is known floating (not a mask converted):
  "lp" / "fp32" / {"m": [callees to resolve]} as in `masks.source`, or "dt" when the
  function saves the receiver's dtype and casts back to it (`dtype = x.dtype; ...;
  out.to(dtype)`).

Silent (nothing recorded) for a function that mentions autocast or `custom_fwd` (its own
regions decide, `check`), a cast inside a loop, a name also bound by `for`, `with`,
an augmented assignment or a later rebind on a path the window cannot order, and any
read of the fp32 copy that is neither. Uses only `ast`.
"""
from __future__ import annotations

import ast
import bisect
import re
from typing import Any, Dict, List, Optional, Set, Tuple

from .. import torchapi
from .astutil import _CHILD_FIELDS, _child_fields, dotted
from . import masks

#: the text of an fp32 cast (a function without one records nothing)
CAST_TEXT = re.compile(r"\.float\(\s*\)|float32|torch\.float\b")
#: methods whose result is a view or a reshaped copy of the same values (same dtype)
_AWARE_TEXT = re.compile(r"autocast|custom_fwd")
_VIEWS = frozenset(
    ("transpose", "contiguous", "view", "reshape", "permute", "unsqueeze", "squeeze", "flatten", "unflatten",
     "expand", "expand_as", "narrow", "movedim", "swapaxes", "t", "repeat_interleave", "repeat")
)
_VIEW_ATTRS = frozenset(("T", "mT", "H", "mH"))
#: reads of a tensor's metadata, not its values
_META_ATTRS = frozenset(("dtype", "shape", "device", "ndim", "is_cuda", "requires_grad"))
_META_METHODS = frozenset(("size", "dim", "numel", "element_size", "get_device", "stride", "is_contiguous"))
_MAX_SITES = 8


def sites(s: Any, node: ast.AST, body: List[ast.stmt]) -> List[Dict[str, Any]]:
    """The fp32 casts of one function (`node`, its `body`) whose copy only feeds lowered ops."""
    casts_at, aware_at = _rows(s)
    first, last = node.lineno, getattr(node, "end_lineno", None) or node.lineno  # type: ignore[attr-defined]
    if not _any_between(casts_at, first, last) or _any_between(aware_at, first, last):
        return []  # no fp32 cast spelled in it, or it handles autocast itself (its regions decide)
    parents: Dict[int, Tuple[ast.AST, str]] = {}
    nodes: List[ast.AST] = []
    todo: List[ast.AST] = list(body)
    for stmt in body:
        parents[id(stmt)] = (node, "body")
    known = _CHILD_FIELDS
    nested = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)
    while todo:
        n = todo.pop()
        nodes.append(n)
        cls = n.__class__
        fields = known.get(cls)
        if fields is None:
            fields = _child_fields(cls)
        for field in fields:
            value = getattr(n, field, None)
            if value is None:
                continue
            for child in value if value.__class__ is list else (value,):
                if isinstance(child, ast.AST) and not isinstance(child, nested):
                    parents[id(child)] = (n, field)
                    todo.append(child)
    casts = [n for n in nodes if isinstance(n, ast.Call) and _fp32_cast(s, n)]
    if not casts:
        return []
    stores: Dict[str, List[ast.AST]] = {}
    loads: Dict[str, List[ast.Name]] = {}
    other: Set[str] = set()
    for n in nodes:
        if isinstance(n, ast.Name):
            (loads if isinstance(n.ctx, ast.Load) else stores).setdefault(n.id, []).append(n)  # type: ignore[arg-type]
        if isinstance(n, (ast.For, ast.AsyncFor, ast.AugAssign, ast.comprehension)):
            other.update(t.id for t in ast.walk(n.target) if isinstance(t, ast.Name))
        elif isinstance(n, ast.withitem) and n.optional_vars is not None:
            other.update(t.id for t in ast.walk(n.optional_vars) if isinstance(t, ast.Name))
        elif isinstance(n, ast.NamedExpr):
            other.add(n.target.id)
    history = _history(nodes)
    out: List[Dict[str, Any]] = []
    for cast in sorted(casts, key=_pos):
        if len(out) >= _MAX_SITES:
            break
        site = _site(s, cast, parents, stores, loads, other, history, body)
        if site is not None:
            out.append(site)
    return out


def _rows(s: Any) -> Tuple[List[int], List[int]]:
    """The rows of the file spelling an fp32 cast, and those naming autocast or `custom_fwd`
    (found once per file, read per function by bisection)."""
    found = getattr(s, "_upcast_rows", None)
    if found is None:
        found = s._upcast_rows = (_match_rows(s.source, CAST_TEXT), _match_rows(s.source, _AWARE_TEXT))
    return found


def _match_rows(source: str, pattern: "re.Pattern[str]") -> List[int]:
    """The 1-based rows of the pattern's matches, in order (newlines counted between matches)."""
    out: List[int] = []
    row, at = 1, 0
    for m in pattern.finditer(source):
        row += source.count("\n", at, m.start())
        at = m.start()
        if not out or out[-1] != row:
            out.append(row)
    return out


def _any_between(rows: List[int], first: int, last: int) -> bool:
    i = bisect.bisect_left(rows, first)
    return i < len(rows) and rows[i] <= last


def _site(
    s: Any, cast: ast.Call, parents: Dict[int, Tuple[ast.AST, str]], stores: Dict[str, List[ast.AST]],
    loads: Dict[str, List[ast.Name]], other: Set[str], history: List[Tuple[Tuple[int, int], str, ast.AST]],
    body: List[ast.stmt],
) -> Optional[Dict[str, Any]]:
    uses: List[Tuple[str, str]] = []
    parent, _ = parents.get(id(cast), (None, ""))
    target = _bound_name(cast, parent, parents)
    if target is None:
        use = _use(s, cast, parents)
        if use is None or use[0] == "meta":
            return None
        uses.append(use)
    else:
        name, stmt = target
        found = _copy_uses(s, name, stmt, parents, stores, loads, other, split=True)
        if not found:
            return None
        uses.extend(found)
    receiver = cast.func.value  # type: ignore[attr-defined]
    src = _receiver_source(s, receiver, history, _pos(cast), body)
    if src is None:
        return None
    ops: List[List[str]] = []
    modules: List[str] = []
    for kind, what in uses:
        if kind == "op":
            if what not in [o[1] for o in ops]:
                ops.append([_aten(what), what])
        elif what not in modules:
            modules.append(what)
    end_row = getattr(cast, "end_lineno", None) or cast.lineno
    line = s.lines[cast.lineno - 1] if cast.lineno == end_row and cast.lineno <= len(s.lines) else ""
    text = line.encode("utf-8")[cast.col_offset : cast.end_col_offset].decode("utf-8", "replace") if line else ""  # type: ignore[attr-defined]
    if not text or len(text) > 40:
        text = f".{cast.func.attr}(...)"  # type: ignore[attr-defined]
    return {
        "r": cast.lineno,
        "c": s._column(cast.lineno, cast.col_offset),
        "er": end_row,
        "ec": s._column(end_row, getattr(cast, "end_col_offset", 0) or 0),
        "t": text,
        "ops": ops[:4],
        "mu": modules[:4],
        "src": src,
    }


def _copy_uses(
    s: Any, name: str, stmt: ast.stmt, parents: Dict[int, Tuple[ast.AST, str]], stores: Dict[str, List[ast.AST]],
    loads: Dict[str, List[ast.Name]], other: Set[str], split: bool,
) -> Optional[List[Tuple[str, str]]]:
    """The value uses of the copy `stmt` binds to `name` (None: a read that is neither metadata
    nor an input of a lowered op, or none at all). With `split`, a read that is one element of
    an unpacking (`q, k, v = qkv[0], qkv[1], qkv[2]`) counts by the uses of the name it binds."""
    if name in other or _in_loop(stmt, parents):
        return None
    end = _end(stmt)
    stop = _window_end(name, stmt, end, stores, parents)
    uses: List[Tuple[str, str]] = []
    for n in loads.get(name, ()):
        if not end <= _pos(n) < stop:
            continue
        use = _use(s, n, parents)
        if use is not None and use[0] == "split" and split:
            holder = _split_statement(n, parents)
            inner = _copy_uses(s, use[1], holder, parents, stores, loads, other, split=False) if holder is not None else None
            if not inner:
                return None
            uses.extend(inner)
            continue
        if use is None or use[0] == "split":
            return None
        if use[0] != "meta":
            uses.append(use)
    return uses or None


def _split_statement(node: ast.AST, parents: Dict[int, Tuple[ast.AST, str]]) -> Optional[ast.stmt]:
    cur = node
    while cur is not None and not isinstance(cur, ast.Assign):
        cur = parents.get(id(cur), (None, ""))[0]  # type: ignore[assignment]
    return cur


def _fp32_cast(s: Any, call: ast.Call) -> bool:
    """`x.float()`, `x.to(torch.float32)`, `x.to(dtype=torch.float)`, `x.type(torch.float32)`."""
    func = call.func
    if not isinstance(func, ast.Attribute) or isinstance(func.value, ast.Constant):
        return False
    if func.attr == "float":
        return not call.args and not call.keywords
    if func.attr in ("to", "type"):
        args = [*call.args, *(k.value for k in call.keywords if k.arg == "dtype")]
        return any(s.dtype(a) == "fp32" for a in args)
    return False


def _bound_name(cast: ast.Call, parent: Optional[ast.AST], parents: Dict[int, Tuple[ast.AST, str]]) -> Optional[Tuple[str, ast.stmt]]:
    """(name, statement) when the cast is the whole value bound to a plain name (`x = x.float()`,
    or one element of `q, k = q.float(), k.float()`)."""
    if isinstance(parent, ast.Assign) and len(parent.targets) == 1 and isinstance(parent.targets[0], ast.Name):
        return parent.targets[0].id, parent
    if isinstance(parent, ast.Tuple):
        stmt, _ = parents.get(id(parent), (None, ""))
        if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Tuple):
            names, values = stmt.targets[0].elts, parent.elts
            if stmt.value is parent and len(names) == len(values):
                i = next(i for i, v in enumerate(values) if v is cast)
                if isinstance(names[i], ast.Name):
                    return names[i].id, stmt
    return None


def _use(s: Any, node: ast.AST, parents: Dict[int, Tuple[ast.AST, str]]) -> Optional[Tuple[str, str]]:
    """What a read of the fp32 copy does: ("meta", "") for its dtype or shape, ("op", name) as
    an input of an op autocast lowers, ("m", spelled) as the input of a callable the project
    must resolve (`self.fc(h)`); None for anything else (the copy then serves something)."""
    cur = node
    for _ in range(12):
        parent, field = parents.get(id(cur), (None, ""))
        if parent is None:
            return None
        if isinstance(parent, ast.Attribute):
            if parent.attr in _META_ATTRS:
                return ("meta", "")
            up, up_field = parents.get(id(parent), (None, ""))
            if isinstance(up, ast.Call) and up_field == "func":
                if parent.attr in _META_METHODS:
                    return ("meta", "")
                if parent.attr in _VIEWS:
                    cur = up
                    continue
                if parent.attr in torchapi.AUTOCAST_LOWER_PRECISION_METHODS and s.qualname(dotted(up.func)) is None:
                    return ("op", parent.attr)
                return None
            if parent.attr in _VIEW_ATTRS:
                cur = parent
                continue
            return None
        if isinstance(parent, ast.Subscript) and field == "value":
            cur = parent
            continue
        if isinstance(parent, ast.BinOp):
            if isinstance(parent.op, ast.MatMult):
                return ("op", "matmul")
            if isinstance(parent.op, (ast.Mult, ast.Div)):
                cur = parent  # a scaling (`q / math.sqrt(d)`): its result feeds what the copy fed
                continue
            return None
        if isinstance(parent, ast.Tuple) and cur is not node:
            stmt, _ = parents.get(id(parent), (None, ""))
            if (
                isinstance(stmt, ast.Assign) and stmt.value is parent and len(stmt.targets) == 1
                and isinstance(stmt.targets[0], ast.Tuple) and len(stmt.targets[0].elts) == len(parent.elts)
            ):
                target = stmt.targets[0].elts[next(i for i, v in enumerate(parent.elts) if v is cur)]
                return ("split", target.id) if isinstance(target, ast.Name) else None
            return None
        if isinstance(parent, ast.keyword):
            parent, field = parents.get(id(parent), (None, ""))
            field = "args"
        if isinstance(parent, ast.Call) and field == "args":
            spelled = dotted(parent.func)
            q = s.qualname(spelled)
            if q in torchapi.AUTOCAST_LOWER_PRECISION_FUNCS:
                return ("op", q)
            if isinstance(parent.func, ast.Attribute) and q is None and parent.func.attr in torchapi.AUTOCAST_LOWER_PRECISION_METHODS:
                return ("op", parent.func.attr)  # `a.matmul(x)`
            if spelled and q is None and spelled.startswith("self.") and spelled.count(".") == 1:
                return ("m", spelled)
            return None
        return None
    return None


def _aten(name: str) -> str:
    """The aten op of a lowered op's spelling (a qualified function or a Tensor method)."""
    return torchapi.AUTOCAST_OP_FUNCTIONS.get(name, name.rsplit(".", 1)[-1])


def _history(nodes: List[ast.AST]) -> List[Tuple[Tuple[int, int], str, ast.AST]]:
    """The function's plain assignments in source order: (where it ends, name, value), the elements
    of `a, b = x, y` one by one, every name of `a, b = f(x)` bound to the whole value."""
    out = []
    for n in nodes:
        if not isinstance(n, ast.Assign) or len(n.targets) != 1:
            continue
        target = n.targets[0]
        if isinstance(target, ast.Name):
            out.append((_end(n), target.id, n.value))
        elif isinstance(target, ast.Tuple):
            if isinstance(n.value, ast.Tuple) and len(n.value.elts) == len(target.elts):
                out.extend((_end(n), t.id, v) for t, v in zip(target.elts, n.value.elts) if isinstance(t, ast.Name))
            else:
                out.extend((_end(n), t.id, n.value) for t in target.elts if isinstance(t, ast.Name))
    out.sort(key=lambda e: e[0])
    return out


def _receiver_source(s: Any, receiver: ast.AST, history: List[Tuple[Tuple[int, int], str, ast.AST]], at: Tuple[int, int], body: List[ast.stmt]) -> masks.Source:
    """What made the cast's receiver (`masks.source` over the assignments before the cast), or
    "dt" when the function saves its dtype and casts back to it; None: not known floating."""
    if isinstance(receiver, ast.Name) and _dtype_restored(receiver.id, body):
        return "dt"
    h = masks.History()
    for pos, name, value in history:
        if pos > at:
            break  # the assignments that end before the cast (not the one it is the value of)
        h.add(name, value, -1)
    found = masks.source(s, receiver, h, len(h))
    return found if found in ("lp", "fp32") or isinstance(found, dict) else None


def _dtype_restored(name: str, body: List[ast.stmt]) -> bool:
    """`dtype = x.dtype; x = x.float(); ...; return out.to(dtype)`: the upcast-and-restore idiom."""
    saved: Set[str] = set()
    for stmt in body:
        for n in ast.walk(stmt):
            if (
                isinstance(n, ast.Assign) and len(n.targets) == 1 and isinstance(n.targets[0], ast.Name)
                and isinstance(n.value, ast.Attribute) and n.value.attr == "dtype"
                and isinstance(n.value.value, ast.Name) and n.value.value.id == name
            ):
                saved.add(n.targets[0].id)
    if not saved:
        return False
    for stmt in body:
        for n in ast.walk(stmt):
            if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr in ("to", "type"):
                args = [*n.args, *(k.value for k in n.keywords if k.arg == "dtype")]
                if any(isinstance(a, ast.Name) and a.id in saved for a in args):
                    return True
    return False


def _in_loop(stmt: ast.AST, parents: Dict[int, Tuple[ast.AST, str]]) -> bool:
    cur = stmt
    while True:
        parent, _ = parents.get(id(cur), (None, ""))
        if parent is None or isinstance(parent, (ast.FunctionDef, ast.AsyncFunctionDef)):
            return False
        if isinstance(parent, (ast.For, ast.AsyncFor, ast.While)):
            return True
        cur = parent


def _blocks(stmt: ast.AST, parents: Dict[int, Tuple[ast.AST, str]]) -> Set[Tuple[int, str]]:
    """The statement lists holding `stmt` and each statement around it: (node id, field)."""
    out: Set[Tuple[int, str]] = set()
    cur = stmt
    while True:
        parent, field = parents.get(id(cur), (None, ""))
        if parent is None:
            return out
        out.add((id(parent), field))
        cur = parent


def _window_end(name: str, stmt: ast.AST, end: Tuple[int, int], stores: Dict[str, List[ast.AST]], parents: Dict[int, Tuple[ast.AST, str]]) -> Tuple[int, int]:
    """Where the copy bound at `stmt` stops being read: the first later binding of `name` in a
    statement list every path from `stmt` goes through (a rebind in another branch does not end it)."""
    blocks = _blocks(stmt, parents)
    best = (10**9, 0)
    for n in stores.get(name, ()):
        if _pos(n) < end:
            continue
        holder = n
        while not isinstance(holder, ast.stmt):
            holder = parents.get(id(holder), (None, ""))[0]  # type: ignore[assignment]
            if holder is None:
                break
        if holder is None:
            continue
        if parents.get(id(holder), (None, ""))[0] is not None and (id(parents[id(holder)][0]), parents[id(holder)][1]) in blocks:
            # `h = self.fc(h)`: the value's reads see the copy, what follows the new binding
            stop = _end(holder) if isinstance(holder, (ast.Assign, ast.AnnAssign)) else _pos(holder)
            best = min(best, stop)
    return best


def _pos(node: ast.AST) -> Tuple[int, int]:
    return (getattr(node, "lineno", 0), getattr(node, "col_offset", 0))


def _end(node: ast.AST) -> Tuple[int, int]:
    return (getattr(node, "end_lineno", None) or getattr(node, "lineno", 0), getattr(node, "end_col_offset", 0) or 0)
