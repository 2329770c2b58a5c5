"""The user's own helpers for a flagged snippet, read from the same file (parent side, no torch).

A flagged expression or training-step slice often uses names it does not define:
a helper function (`compute_loss(...)`), a class, a constant, a local computed a
few lines earlier (`state = {...}` before `torch.save(state, path)`). Instead of
giving up (`could not bind ...`), the verifier runs those definitions too: this
module finds, for each such name, the statement that defines it (in the
enclosing function before the slice, else at module level), transitively, and
returns their source in file order as a *prelude* that the worker runs before
the slice (`data["prelude"]`). Names the lab binds by role (model, optimizer,
scaler, loss, ...) are never taken from the file: the slice runs on the lab's
tiny real objects. What the prelude cannot define stays unbound, and is bound
lazily in the worker (a use of it ends the run as "could not bind").
"""
from __future__ import annotations

import ast
import os
import textwrap
from typing import Any, Dict, Iterator, List, Optional, Set, Tuple

from .snippet import MODULES, VALUE_ROLES, Refused, free_names, parse, role_of

#: at most this many statements are lifted into a prelude
MAX_STATEMENTS = 16
#: rules whose snippet is a `torch.save(obj, path)` call: the experiment runs `obj` only
SAVED_OBJECT = frozenset({"AMP401", "AMP402"})


def saved_object(source: str) -> str:
    """The source of the object a `save(obj, path)` call writes ("" when it is not one)."""
    try:
        tree = ast.parse(textwrap.dedent(source).strip())
    except SyntaxError:
        return ""
    call = tree.body[0].value if len(tree.body) == 1 and isinstance(tree.body[0], ast.Expr) else None
    if not isinstance(call, ast.Call) or not call.args:
        return ""
    return ast.unparse(call.args[0])


def _defines(node: ast.stmt) -> Set[str]:
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return {node.name}
    targets: List[ast.AST] = []
    if isinstance(node, ast.Assign):
        targets = list(node.targets)
    elif isinstance(node, ast.AnnAssign) and node.value is not None:
        targets = [node.target]
    names: Set[str] = set()
    for t in targets:
        for sub in ast.walk(t):
            if isinstance(sub, ast.Name):
                names.add(sub.id)
    return names


def _statements(body: List[ast.stmt], before: int) -> Iterator[ast.stmt]:
    """Statements of a function body that start before row `before`, at any depth, not in nested scopes' bodies."""
    for node in body:
        if node.lineno >= before:
            return
        yield node
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            continue
        for field in ("body", "orelse", "finalbody"):
            yield from _statements(getattr(node, field, []) or [], before)
        for handler in getattr(node, "handlers", []) or []:
            yield from _statements(handler.body, before)


def _enclosing_function(tree: ast.Module, row: int) -> Optional[ast.AST]:
    found = None
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.lineno <= row <= (node.end_lineno or node.lineno):
            if found is None or node.lineno >= found.lineno:
                found = node
    return found


def _slice_start(lines: List[str], row: int, snippet: str) -> int:
    """The file row where the flagged slice begins (its first line, searched upwards from `row`)."""
    first = next((ln.strip() for ln in snippet.splitlines() if ln.strip()), "")
    for r in range(min(row, len(lines)), 0, -1):
        if lines[r - 1].strip() == first:
            return r
    return row


def _wanted(tree: ast.Module, data: Dict[str, Any], training: bool) -> Set[str]:
    """Names of `tree` the lab does not bind by role: they need the user's definitions."""
    free = free_names(tree)
    wanted = set()
    for name in free.names:
        role = role_of(name, data)
        if name in MODULES or (role or "").startswith(("module:", "api:")):
            continue
        if training:
            if role is None or (name in free.called and role in VALUE_ROLES):
                wanted.add(name)  # names the lab binds by role (model, optimizer, ...) stay the lab's
        elif name in free.called:
            wanted.add(name)
    return wanted


def _constants(tree: ast.Module, data: Dict[str, Any]) -> Set[str]:
    """Names of an expression snippet the lab would synthesize as tensors but that the file
    defines as module-level constants (`NEG_INF = -1e9`): the file's value is the truth."""
    free = free_names(tree)
    return {n for n in free.names if n not in free.called and role_of(n, data) is None}


def _is_constant(node: ast.stmt) -> bool:
    value = getattr(node, "value", None)
    try:
        ast.literal_eval(value) if value is not None else None
    except ValueError:
        return isinstance(value, ast.UnaryOp) and isinstance(value.operand, ast.Constant)
    return value is not None


def _defaults(func: Optional[ast.AST]) -> Dict[str, ast.expr]:
    """A function's parameters with literal defaults (`log_every=50`)."""
    if func is None:
        return {}
    args = func.args  # type: ignore[attr-defined]
    positional = [*args.posonlyargs, *args.args]
    out = {}
    for arg, default in zip(positional[len(positional) - len(args.defaults) :], args.defaults):
        out[arg.arg] = default
    for arg, default in zip(args.kwonlyargs, args.kw_defaults):
        if default is not None:
            out[arg.arg] = default
    return {k: v for k, v in out.items() if _literal(v)}


def _parameters(func: Optional[ast.AST]) -> Set[str]:
    if func is None:
        return set()
    args = func.args  # type: ignore[attr-defined]
    return {a.arg for a in [*args.posonlyargs, *args.args, *args.kwonlyargs]} - {"self", "cls"}


def _literal(node: ast.expr) -> bool:
    try:
        ast.literal_eval(node)
    except ValueError:
        return False
    return True


def prelude_for(text: str, row: int, snippet: str, data: Dict[str, Any], training: bool) -> Tuple[str, List[str]]:
    """(prelude source, the names it defines) for the snippet flagged at `row` of the file `text`."""
    try:
        tree = ast.parse(text)
        snippet_tree = parse(snippet)
        wanted = _wanted(snippet_tree, data, training)
        constants = set() if training else _constants(snippet_tree, data)
    except (SyntaxError, ValueError, Refused, RecursionError):
        return "", []
    if not wanted and not constants:
        return "", []
    lines = text.splitlines()
    start = _slice_start(lines, row, snippet)
    func = _enclosing_function(tree, start)
    local = list(_statements(func.body, start)) if func is not None else []
    module = [n for n in tree.body if not (func is not None and n.lineno <= func.lineno <= (n.end_lineno or n.lineno))]
    defaults = _defaults(func)
    chosen: Dict[int, ast.stmt] = {}
    from_defaults: List[str] = []
    done: Set[str] = set()
    for name in sorted(constants):
        node = next((n for n in reversed(module) if name in _defines(n) and _is_constant(n)), None)
        if node is not None and not any(name in _defines(n) for n in local) and name not in defaults:
            chosen[id(node)] = node
            done.add(name)
    todo = sorted(wanted)
    while todo and len(chosen) < MAX_STATEMENTS:
        name = todo.pop()
        if name in done:
            continue
        done.add(name)
        node = next((n for n in reversed(local) if name in _defines(n)), None)
        if node is None and name in defaults:
            from_defaults.append(f"{name} = {ast.unparse(defaults[name])}")
            continue
        if node is None:  # module level: before the slice, or anywhere when the slice is in a function
            node = next((n for n in reversed(module) if name in _defines(n) and (func is not None or n.lineno < start)), None)
        if node is None or id(node) in chosen:
            continue
        chosen[id(node)] = node
        source = ast.get_source_segment(text, node, padded=True)
        if source is None:
            continue
        try:
            inner = ast.parse(textwrap.dedent(source))
        except SyntaxError:
            continue
        todo.extend(n for n in _wanted(inner, data, training) if n not in done)
    nodes = sorted(chosen.values(), key=lambda n: n.lineno)
    parts = []
    for node in nodes:
        segment = ast.get_source_segment(text, node, padded=True)
        if segment:
            decorators = [d for d in getattr(node, "decorator_list", [])]
            if decorators:  # decorators sit above `def`: take them along
                first = min(d.lineno for d in decorators)
                segment = "\n".join(lines[first - 1 : node.lineno - 1]) + "\n" + segment
            parts.append(textwrap.dedent(segment))
    called = free_names(snippet_tree).called
    params = _parameters(func) - set(defaults)
    defined = {n for node in chosen.values() for n in _defines(node)}
    modules = sorted(n for n in wanted if n in called and n in params and n not in defined and n not in from_defaults)
    parts = from_defaults + parts
    names = sorted({n for node in nodes for n in _defines(node)} | {d.split(" = ", 1)[0] for d in from_defaults})
    if modules:  # a parameter the slice calls (`head(model(x))`): a module passed in, stood in by a tiny real one
        parts.append("\n".join(f"{m} = __amplint_module__()" for m in modules))
        names += modules
    return "\n".join(parts), names


#: rules whose experiment first runs the statement that made the model fp16 or bf16 (`data["cast"]`)
CAST_RULES = frozenset({"AMP106", "AMP201", "AMP206", "AMP401"})
#: rules that flag the cast itself: the finding's own row is the statement to run
CAST_AT_LOCATION = frozenset({"AMP201", "AMP206"})
#: rules whose cross-file findings carry no `snippet`: the parent reads the flagged call at the finding
CALL_AT_LOCATION = frozenset({"AMP201", "AMP206", "AMP302", "AMP303", "AMP401"})
#: rules that flag a tensor passed to a call: the parent reads the call around it
CALL_AROUND_LOCATION = frozenset({"AMP204"})
#: rules whose flagged call's torch names are resolved from the file's imports (`data["names"]`):
#: AMP803's policy constructor or comm-hook registration, read at the call's start or, for
#: `reduce_dtype=torch.float16`, as the call the flagged argument is passed to
IMPORTED_NAMES = frozenset({"AMP803"})
#: rules that flag a cast whose model a wrapper's mixed-precision policy wraps (AMP804): the parent
#: reads the flagged cast call (`snippet`) and the policy constructor (`policy_snippet`, at the
#: related "its policy" site, else the wrapper call's `mp_policy=` call), each with its file's torch imports
CAST_AND_POLICY = frozenset({"AMP804"})
#: expression rules whose flagged literal sits inside an expression: the parent reads the value of its statement
VALUE_AT_LOCATION = frozenset({"AMP301"})
_COMPOUND = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.If, ast.For, ast.AsyncFor, ast.While, ast.With, ast.AsyncWith, ast.Try)


def _innermost(text: str, accept, later) -> Optional[ast.AST]:
    """The node of `text` that `accept` takes and that no other accepted node beats by `later`
    (a key: the greatest wins, the last seen on a tie); None when the text does not parse."""
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError, RecursionError):
        return None
    found = None
    for node in ast.walk(tree):
        if accept(node) and (found is None or later(node) >= later(found)):
            found = node
    return found


def _source(text: str, node: Optional[ast.AST]) -> str:
    return (ast.get_source_segment(text, node) or "") if node is not None else ""


def call_at(text: str, row: int, column: int) -> str:
    """The source of the outermost call that starts at `row`:`column` (1-based) of `text` ("" when none)."""
    found = _innermost(
        text, lambda n: isinstance(n, ast.Call) and n.lineno == row and n.col_offset == column - 1,
        lambda n: (n.end_lineno, n.end_col_offset),
    )
    return _source(text, found)


def _spans(node: ast.AST, row: int) -> bool:
    return node.lineno <= row <= (node.end_lineno or node.lineno)


def statement_at(text: str, row: int) -> str:
    """The source of the innermost simple statement spanning `row` (dedented; "" when none)."""
    found = _innermost(
        text, lambda n: isinstance(n, ast.stmt) and not isinstance(n, _COMPOUND) and _spans(n, row), lambda n: n.lineno,
    )
    segment = _source(text, found)
    return textwrap.dedent(segment) if segment else ""


def call_around(text: str, row: int, column: int) -> str:
    """The source of the innermost call with an argument at `row`:`column` (1-based): the call
    a flagged tensor is passed to ("" when none)."""
    at = (row, column - 1)

    def holds(node: ast.AST) -> bool:
        return isinstance(node, ast.Call) and any(
            (arg.lineno, arg.col_offset) <= at < (arg.end_lineno or arg.lineno, arg.end_col_offset or 0)
            for arg in [*node.args, *(k.value for k in node.keywords)]
        )

    return _source(text, _innermost(text, holds, lambda n: (n.lineno, n.col_offset)))


def torch_imports(text: str, snippet: str) -> Dict[str, str]:
    """{name: qualified name} for the free names of `snippet` that `text` imports from torch
    (`from torch.distributed.fsdp import MixedPrecisionPolicy`, `import torch.distributed as
    dist`, `... import default_hooks as default`); names imported from elsewhere are left out."""
    try:
        tree = ast.parse(text)
        wanted = set(free_names(parse(snippet)).names)
    except (SyntaxError, ValueError, Refused, RecursionError):
        return {}
    out: Dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            pairs = [(a.asname or a.name.split(".")[0], a.name if a.asname else a.name.split(".")[0]) for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            pairs = [(a.asname or a.name, f"{node.module}.{a.name}") for a in node.names if a.name != "*"]
        else:
            continue
        for name, qualname in pairs:
            if name in wanted and qualname.split(".")[0] == "torch":
                out[name] = qualname
    return out


def policy_argument(text: str, row: int) -> str:
    """The `mp_policy=` (`mixed_precision=`) argument of the wrapper call at `row` when it is a
    call (`fully_shard(m, mp_policy=MixedPrecisionPolicy(...))`), "" otherwise."""
    found = _innermost(
        text, lambda n: isinstance(n, ast.Call) and n.lineno == row and any(k.arg in ("mp_policy", "mixed_precision") for k in n.keywords),
        lambda n: n.col_offset,
    )
    value = next((k.value for k in getattr(found, "keywords", ()) if k.arg in ("mp_policy", "mixed_precision")), None)
    return _source(text, value) if isinstance(value, ast.Call) else ""


def value_at(text: str, row: int) -> str:
    """The value of the assignment, return or expression statement spanning `row` ("" otherwise)."""
    found = _innermost(
        text, lambda n: isinstance(n, (ast.Assign, ast.AugAssign, ast.AnnAssign, ast.Return, ast.Expr)) and _spans(n, row),
        lambda n: n.lineno,
    )
    value = getattr(found, "value", None)
    if value is None:
        return ""
    if isinstance(found, ast.AugAssign):  # `x += y * -1e9` is `x + y * -1e9`
        op = ast.unparse(ast.BinOp(left=ast.Name("a"), op=found.op, right=ast.Name("b")))[2:-2]
        target, right = ast.get_source_segment(text, found.target), ast.get_source_segment(text, value)
        return f"{target} {op} ({right})" if target and right else ""
    return ast.get_source_segment(text, value) or ""


#: at most this many statements on a value's path (the flagged one, its uses, a caller's uses)
MAX_PATH = 16
#: the name a path gives the value its function returns (the caller's statement reads it)
RETURNED = "__amplint_returned__"


def _assigned(stmt: ast.stmt) -> Set[str]:
    """Names a simple statement binds: assignment targets, and the receiver of an in-place
    method call (`scores.masked_fill_(...)`, `x.add_(m)`)."""
    names: Set[str] = set()
    if isinstance(stmt, ast.Assign):
        targets: List[ast.AST] = list(stmt.targets)
    elif isinstance(stmt, (ast.AugAssign, ast.AnnAssign)):
        targets = [stmt.target]
    else:
        targets = []
        call = stmt.value if isinstance(stmt, ast.Expr) else None
        if isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute) and call.func.attr.endswith("_"):
            if isinstance(call.func.value, ast.Name):
                names.add(call.func.value.id)
    for t in targets:
        if isinstance(t, ast.Name):
            names.add(t.id)
        elif isinstance(t, (ast.Tuple, ast.List)):
            names.update(e.id for e in t.elts if isinstance(e, ast.Name))
    return names


def _reads(stmt: ast.stmt, names: Set[str]) -> bool:
    return any(isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load) and n.id in names for n in ast.walk(stmt)) or (
        isinstance(stmt, ast.AugAssign) and isinstance(stmt.target, ast.Name) and stmt.target.id in names
    )


def _stores_elsewhere(stmt: ast.stmt) -> bool:
    """An assignment into an attribute or item (`self.mask = m`): the value leaves the path."""
    targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target] if isinstance(stmt, (ast.AugAssign, ast.AnnAssign)) else []
    return any(isinstance(t, (ast.Attribute, ast.Subscript)) for t in targets)


def _simple(body: List[ast.stmt], chain: Tuple[Tuple[int, str], ...] = ()) -> Iterator[Tuple[ast.stmt, Tuple[Tuple[int, str], ...]]]:
    """The simple statements of a function body in source order, each with its chain of
    (compound statement, arm) around it; nested functions and classes are not entered."""
    for node in body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            continue
        if not isinstance(node, _COMPOUND):
            yield node, chain
            continue
        for arm in ("body", "orelse", "finalbody"):
            yield from _simple(getattr(node, arm, []) or [], chain + ((id(node), arm),))
        for i, handler in enumerate(getattr(node, "handlers", []) or []):
            yield from _simple(handler.body, chain + ((id(node), f"handler{i}"),))


def _exclusive(a: Tuple[Tuple[int, str], ...], b: Tuple[Tuple[int, str], ...]) -> bool:
    """The two chains sit in different arms of one compound statement (`if`/`else`): no run reaches both."""
    for x, y in zip(a, b):
        if x != y:
            return x[0] == y[0]
    return False


def _follow(func: ast.AST, start: ast.stmt, tracked: Set[str], steps: List[Tuple[str, int]], escapes: List[str]) -> bool:
    """Append to `steps` the statements of `func` after `start` that read a name the value
    reached (`tracked`, which grows with their targets); True when the value is returned."""
    flat = list(_simple(func.body))  # type: ignore[attr-defined]
    here = next((c for s, c in flat if s is start), None)
    if here is None:
        return False
    after = False
    returned = False
    for stmt, chain in flat:
        if stmt is start:
            after = True
            continue
        if not after or _exclusive(here, chain):
            continue
        if len(steps) >= MAX_PATH or not tracked:
            break
        if not _reads(stmt, tracked):
            if chain == here[: len(chain)]:  # overwritten on every run that got here: no longer the value
                tracked -= _assigned(stmt)
            continue
        if isinstance(stmt, ast.Return):
            if stmt.value is not None:
                steps.append((f"{RETURNED} = {ast.unparse(stmt.value)}", stmt.lineno))
                returned = True
            break
        if _stores_elsewhere(stmt):
            escapes.append(f"stored by line {stmt.lineno}")
        steps.append((ast.unparse(stmt), stmt.lineno))
        tracked |= _assigned(stmt)
    return returned


def _caller(tree: ast.Module, func: ast.AST) -> Optional[Tuple[ast.AST, ast.stmt, str]]:
    """(caller function, statement, target) of the first `target = f(...)` / `target = self.f(...)`
    of the file that calls `func` (a method through `self`, a module function by name)."""
    method = any(isinstance(n, ast.ClassDef) and func in n.body for n in ast.walk(tree))
    name = func.name  # type: ignore[attr-defined]
    for outer in ast.walk(tree):
        if not isinstance(outer, (ast.FunctionDef, ast.AsyncFunctionDef)) or outer is func:
            continue
        for stmt, _ in _simple(outer.body):
            if not (isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name)):
                continue
            call = stmt.value
            if not isinstance(call, ast.Call):
                continue
            f = call.func
            if (method and isinstance(f, ast.Attribute) and f.attr == name and isinstance(f.value, ast.Name) and f.value.id == "self") or (
                not method and isinstance(f, ast.Name) and f.id == name
            ):
                return outer, stmt, stmt.targets[0].id
    return None


def value_path(text: str, row: int) -> Optional[Dict[str, Any]]:
    """The path of the value the statement at `row` assigns: that statement, then each later
    statement of its function that reads the value or what was computed from it (the other
    arm of an `if` around it left out), and, when the function returns it, the same from the
    first statement of the file that assigns a call of that function (`bias = self.side_bias(m)`).

    As one straight-line program (`source`, each statement on its own line, `rows` their
    file rows); `ends` says whether the path stays in the code read (`function`) or leaves it
    (`returned`, `stored`: the value goes where this file does not show)."""
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError, RecursionError):
        return None
    start = _innermost(
        text, lambda n: isinstance(n, (ast.Assign, ast.AugAssign, ast.AnnAssign)) and _spans(n, row), lambda n: n.lineno,
    )
    func = _enclosing_function(tree, row)
    if start is None or func is None:
        return None
    # the same node in `tree` (`_innermost` parsed its own copy)
    start = next((s for s, _ in _simple(func.body) if s.lineno == start.lineno and type(s) is type(start)), None)
    tracked = _assigned(start) if start is not None else set()
    if not tracked:
        return None
    steps: List[Tuple[str, int]] = [(ast.unparse(start), start.lineno)]
    escapes: List[str] = []
    returned = _follow(func, start, set(tracked), steps, escapes)
    ends = "function"
    functions = [func.name]
    if returned:
        found = _caller(tree, func)
        if found is None:
            ends = "returned"
        else:
            outer, stmt, target = found
            steps.append((f"{target} = {RETURNED}", stmt.lineno))
            functions.append(outer.name)  # type: ignore[attr-defined]
            if _follow(outer, stmt, {target}, steps, escapes):
                ends = "returned"
    if escapes and ends == "function":
        ends = "stored"
    if len(steps) < 2:
        return None  # the flagged statement alone: nothing to add to the flagged expression
    return {"source": "\n".join(s for s, _ in steps), "rows": [r for _, r in steps], "functions": functions, "ends": ends}


def self_attributes(text: str, row: int, snippet: str) -> List[str]:
    """`self.X = ...` statements of the `__init__` of the class around `row`, for each `self.X(...)`
    the snippet calls (`self.aux_loss = nn.BCELoss()` for `self.aux_loss(aux, masks)`)."""
    try:
        tree, called = ast.parse(text), ast.parse(textwrap.dedent(snippet))
    except (SyntaxError, ValueError, RecursionError):
        return []
    wanted = {
        n.func.attr
        for n in ast.walk(called)
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and isinstance(n.func.value, ast.Name) and n.func.value.id == "self"
    }
    if not wanted:
        return []
    cls = None
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef) and node.lineno <= row <= (node.end_lineno or node.lineno):
            if cls is None or node.lineno >= cls.lineno:
                cls = node
    init = next((n for n in (cls.body if cls else []) if isinstance(n, ast.FunctionDef) and n.name == "__init__"), None)
    out = []
    for stmt in init.body if init is not None else []:
        if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1:
            t = stmt.targets[0]
            if isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name) and t.value.id == "self" and t.attr in wanted:
                out.append(ast.unparse(stmt))
    return out


def imported_call(text: str, row: int, name: str) -> Optional[Dict[str, Any]]:
    """The first call in `text` of what the import at `row` binds for `name` (`from torch.cuda.amp
    import GradScaler`), called by that name or by a name assigned from it (`scaler_type =
    GradScaler` ... `scaler_type()`): {"source", "row", "name"}, None when the file calls none."""
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError, RecursionError):
        return None
    bound = {
        a.asname or a.name
        for n in ast.walk(tree)
        if isinstance(n, ast.ImportFrom) and n.lineno <= row <= (n.end_lineno or n.lineno)
        for a in n.names
        if a.name == name
    }
    if not bound:
        return None
    for n in ast.walk(tree):  # aliases: `scaler_type = GradScaler`
        if isinstance(n, ast.Assign) and isinstance(n.value, ast.Name) and n.value.id in bound:
            bound.update(t.id for t in n.targets if isinstance(t, ast.Name))
    calls = [n for n in ast.walk(tree) if isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id in bound]
    if not calls:
        return None
    call = min(calls, key=lambda c: (c.lineno, c.col_offset))
    return {"source": ast.get_source_segment(text, call) or ast.unparse(call), "row": call.lineno, "name": call.func.id}  # type: ignore[attr-defined]


class Preludes:
    """The data sent for each finding: its own, plus the prelude from its file (files read once)."""

    def __init__(self) -> None:
        self._texts: Dict[str, Optional[str]] = {}

    def _text(self, name: str) -> Optional[str]:
        if name not in self._texts:
            try:
                with open(name, encoding="utf-8") as fh:
                    self._texts[name] = fh.read()
            except (OSError, UnicodeDecodeError):
                self._texts[name] = None
        return self._texts[name]

    def _site(self, d: Any, data: Dict[str, Any]) -> Optional[Tuple[str, int]]:
        """(file, row) of the statement that made the finding's model fp16 (bf16): another
        file's (the related site the project model names, "made fp16 here"), the `cast_row`
        of the finding's file, or AMP201's (AMP206's) own flagged cast."""
        if data.get("cast_at"):
            for r in getattr(d, "related", None) or ():
                note = getattr(r, "message", "") or ""
                if ("fp16" in note or "bf16" in note) and getattr(r, "filename", None):
                    return r.filename, r.location.row
            return None
        if isinstance(data.get("cast_row"), int):
            return d.filename, data["cast_row"]
        if getattr(d, "code", None) in CAST_AT_LOCATION:
            return d.filename, d.location.row
        return None

    def _cast(self, d: Any, data: Dict[str, Any]) -> Optional[Dict[str, Any]]:
        site = self._site(d, data)
        text = self._text(site[0]) if site and isinstance(site[0], str) else None
        if site is None or text is None:
            return None
        source = statement_at(text, site[1])
        if not source.strip():
            return None
        cast: Dict[str, Any] = {"source": source, "site": f"{os.path.basename(site[0])}:{site[1]}"}
        prelude, names = prelude_for(text, site[1], source, {}, False)
        if prelude:
            cast.update(prelude=prelude, prelude_names=names)
        return cast

    def data_for(self, d: Any) -> Dict[str, Any]:
        data = dict(d.data) if isinstance(d.data, dict) else {}
        code = getattr(d, "code", None)
        name = getattr(d, "filename", None)
        own = self._text(name) if isinstance(name, str) and name.endswith(".py") else None
        if code in CALL_AT_LOCATION and not data.get("snippet") and own is not None:
            # a cross-file finding: the flagged call, read at the finding's place
            source = call_at(own, d.location.row, d.location.column)
            if source:
                data["snippet"] = source
        if code in CALL_AROUND_LOCATION and not data.get("snippet") and own is not None:
            source = call_around(own, d.location.row, d.location.column)
            if source:
                data["snippet"] = source
        if code in IMPORTED_NAMES and not data.get("snippet") and own is not None:
            source = call_at(own, d.location.row, d.location.column) or call_around(own, d.location.row, d.location.column)
            if source:
                data["snippet"] = source
                names = torch_imports(own, source)
                if names:
                    data["names"] = {**names, **(data.get("names") if isinstance(data.get("names"), dict) else {})}
        if code in CAST_AND_POLICY and own is not None:
            data.update(self._cast_and_policy(d, data, own))
        if code in VALUE_AT_LOCATION and not data.get("snippet") and own is not None:
            source = value_at(own, d.location.row)
            if source:
                data["snippet"] = source
        if code in VALUE_AT_LOCATION and own is not None:  # where the flagged value goes: its path
            path = value_path(own, d.location.row)
            if path:
                prelude, names = prelude_for(own, d.location.row, path["source"], data, False)
                if prelude:
                    path.update(prelude=prelude, prelude_names=names)
                data["path"] = path
        if code == "AMP001" and data.get("use") == "import" and own is not None and isinstance(data.get("deprecated"), str):
            # an import line: the file's own call of what it imports is the code to run
            call = imported_call(own, d.location.row, data["deprecated"].rsplit(".", 1)[-1])
            if call:
                names = data.get("names") if isinstance(data.get("names"), dict) else {}
                data.update(import_line=data.get("snippet"), snippet=call["source"], call_row=call["row"], names={**names, call["name"]: data["deprecated"]})
        if code in CAST_RULES:
            cast = self._cast(d, data)
            if cast:
                data["cast"] = cast
        where = None
        if code == "AMP402" and data.get("helper") and not data.get("snippet"):
            where = self._helper_site(d, "saved here" if data.get("side") == "save" else "restored here")
            if where is not None:
                data["snippet" if data.get("side") == "save" else "resume_site"] = where[2]
                data["helper_site"] = f"{os.path.basename(where[0])}:{where[1]}"
        data = self._with_prelude(d, data, *(where[:2] if where and data.get("side") == "save" else ()))
        if code == "AMP107" and own is not None:  # the function that builds the GradScaler, run once per epoch
            epoch = self.function_around(d.filename, d.location.row)
            if epoch:
                data["epoch_function"] = epoch
        if code == "AMP402" and data.get("side") == "load":
            resume = self._resume(d, data, where)
            if resume and where is not None and own is not None:  # resumed through a helper: the call as written
                resume["call"] = call_at(own, d.location.row, d.location.column)
            if resume:
                data["resume"] = resume
        if code == "AMP303" and own is not None:  # the loss path: the function around the flagged call
            path = self.function_around(d.filename, d.location.row)
            if path:
                data["loss_path"] = path
        if code == "AMP303" and own is not None and isinstance(data.get("snippet"), str):
            attrs = self_attributes(own, d.location.row, data["snippet"])
            if attrs:  # the loss module the flagged call uses, as its class's `__init__` builds it
                data["prelude"] = "\n".join([p for p in [data.get("prelude")] if p] + attrs)
                data["prelude_names"] = sorted({*(data.get("prelude_names") or []), *(a.split(" =", 1)[0] for a in attrs)})
        return data

    def _cast_and_policy(self, d: Any, data: Dict[str, Any], own: str) -> Dict[str, Any]:
        """AMP804: the flagged cast call (`snippet`, `names`) and the wrapper's policy constructor
        (`policy_snippet`, `policy_names`, `policy_site`), read where the finding's sites are."""
        out: Dict[str, Any] = {}
        cast = call_at(own, d.location.row, d.location.column)
        if cast:
            out.update(snippet=cast, names=torch_imports(own, cast))
        sites = []
        for r in getattr(d, "related", None) or ():
            if (getattr(r, "message", "") or "") == "its policy":
                sites.append(("call", r.filename or d.filename, r.location.row, r.location.column))
        wrapper = data.get("wrapper_site")
        if isinstance(wrapper, (list, tuple)) and len(wrapper) == 2 and isinstance(wrapper[0], str) and isinstance(wrapper[1], int):
            sites.append(("argument", wrapper[0], wrapper[1], 0))
        for kind, filename, row, column in sites:
            text = self._text(filename) if isinstance(filename, str) else None
            source = (call_at(text, row, column) if kind == "call" else policy_argument(text, row)) if text is not None else ""
            if source:
                out.update(policy_snippet=source, policy_names=torch_imports(text, source), policy_site=f"{os.path.basename(filename)}:{row}")
                break
        return out

    def _helper_site(self, d: Any, note: str) -> Optional[Tuple[str, int, str]]:
        """(file, row, source of the call there) of a related site whose note starts with `note`:
        the helper's own `torch.save(...)` or `load_state_dict` line in another file."""
        for r in getattr(d, "related", None) or ():
            if (getattr(r, "message", "") or "").startswith(note) and getattr(r, "filename", None):
                text = self._text(r.filename)
                source = statement_at(text, r.location.row) if text is not None else ""
                if source.strip():
                    return r.filename, r.location.row, source.strip()
        return None

    def _resume(self, d: Any, data: Dict[str, Any], where: Optional[Tuple[str, int, str]]) -> Optional[Dict[str, Any]]:
        """The function that restores the checkpoint (the helper a call resumes through, or the
        function around the flagged restore), as source, with the definitions of its file it calls."""
        filename, row = (where[0], where[1]) if where else (d.filename, d.location.row)
        return self.function_around(filename, row)

    def function_around(self, filename: Any, row: int) -> Optional[Dict[str, Any]]:
        """The function of `filename` around `row`: its source, name, place and the definitions
        of the same file it calls (None when the row is not in a function)."""
        text = self._text(filename) if isinstance(filename, str) else None
        if text is None:
            return None
        try:
            tree = ast.parse(text)
        except (SyntaxError, ValueError, RecursionError):
            return None
        func = _enclosing_function(tree, row)
        if func is None:
            return None
        source = ast.get_source_segment(text, func, padded=True)
        if not source:
            return None
        out: Dict[str, Any] = {"source": textwrap.dedent(source), "function": func.name, "site": f"{os.path.basename(filename)}:{func.lineno}"}
        prelude, names = prelude_for(text, func.lineno, out["source"], {}, False)  # the helpers its body calls
        if prelude:
            out.update(prelude=prelude, prelude_names=names)
        return out

    def _with_prelude(self, d: Any, data: Dict[str, Any], filename: Optional[str] = None, row: Optional[int] = None) -> Dict[str, Any]:
        training = isinstance(data.get("step_source"), str)
        snippet = data.get("step_source") if training else data.get("snippet")
        if getattr(d, "code", None) in SAVED_OBJECT and isinstance(snippet, str):
            snippet, training = saved_object(snippet), True  # what the save call writes, bound by role
        name = filename or getattr(d, "filename", None)
        if not isinstance(snippet, str) or not snippet.strip() or not isinstance(name, str) or not name.endswith(".py"):
            return data
        text = self._text(name)
        if text is None:
            return data
        prelude, names = prelude_for(text, row or d.location.row, snippet, data, training)
        if prelude:
            data.update(prelude=prelude, prelude_names=names)
        return data
