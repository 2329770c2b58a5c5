"""What a function does with modules' parameters, read with `ast` for the summary (AMP201).

An optimizer is often built far from the module it updates: a script collects
`trainable_params` from the models it trains (`trainable_params.extend(m.parameters())`
for each `m` appended to `training_models`, `[{"params": list(unet.parameters()), "lr": lr}]`,
`itertools.chain(a.parameters(), b.parameters())`) and hands the list to a project
helper that constructs the optimizer class the arguments pick. To tell which modules
such a list holds, the summary keeps per function:

* `pf`: local name -> the modules whose parameters it holds (spelled as the function
  spells them: `unet`, `self.model`), through assignments, `append`/`extend`/`+=` and
  loops over a local list of modules;
* `fz`: the modules the function freezes (`m.requires_grad_(False)`,
  `for p in m.parameters(): p.requires_grad = False`), whose parameters are then not
  what an optimizer updates in fp16.

Statements of nested functions and classes are not read (they run elsewhere); the
reading is flow-insensitive within the function (a union over its statements).
"""
from __future__ import annotations

import ast
from typing import Dict, FrozenSet, Iterable, List, Optional, Set

from .astutil import dotted, walk_expression

_PARAMETERS = ("parameters", "named_parameters")
_ADDS = ("append", "extend", "insert")


def parameter_flows(body: List[ast.stmt], watched: Iterable[str] = ()) -> Dict[str, object]:
    """{"pf": {name: [modules]}, "fz": [modules], "fv", "lv", "rb"} of a function body (only the
    non-empty ones); `watched`: the names whose rebinding rows `rb` keeps (`x = ...`, `del x`)."""
    reader = _Reader()
    reader.watched = set(watched)
    reader.block(body)
    out: Dict[str, object] = {}
    flows = {k: sorted(v) for k, v in reader.flows.items() if v}
    if flows:
        out["pf"] = flows
    if reader.frozen:
        out["fz"] = sorted(reader.frozen)
    if reader.maybe:
        out["fv"] = sorted(reader.maybe)
    walks = {k: sorted(v) for k, v in reader.walks.items() if v}
    if walks:
        out["lv"] = walks
    if reader.rebound:
        out["rb"] = {k: sorted(v) for k, v in reader.rebound.items()}
    return out


class _Reader:
    def __init__(self) -> None:
        self.members: Dict[str, Set[str]] = {}  # a local list of modules -> its members
        self.loops: Dict[str, Set[str]] = {}  # a loop variable -> the modules it walks
        self.flows: Dict[str, Set[str]] = {}
        self.frozen: Set[str] = set()
        self.maybe: Set[str] = set()  # `m.requires_grad_(train_m)`: trained or frozen at run time
        self.walks: Dict[str, Set[str]] = {}  # every loop variable over a list of modules, ever
        self.watched: Set[str] = set()
        self.rebound: Dict[str, Set[int]] = {}  # a watched name -> the rows that bind or delete it

    def block(self, body: Iterable[ast.stmt]) -> None:
        for stmt in body:
            self.statement(stmt)

    def statement(self, stmt: ast.stmt) -> None:
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            return
        if isinstance(stmt, (ast.Assign, ast.AnnAssign)) and stmt.value is not None:
            targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
            for target in targets:
                self.assign(target, stmt.value)
                self.rebind(target, stmt.lineno, _kept(target, stmt.value))
            return
        if isinstance(stmt, ast.Delete):
            for target in stmt.targets:
                self.rebind(target, stmt.lineno)
            return
        if isinstance(stmt, ast.AugAssign) and isinstance(stmt.target, ast.Name) and isinstance(stmt.op, ast.Add):
            self.add(stmt.target.id, stmt.value, many=True)
            return
        if isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call):
            self.call(stmt.value)
            return
        if isinstance(stmt, (ast.For, ast.AsyncFor)):
            self.loop(stmt)
            return
        for field in ("body", "orelse", "finalbody"):
            self.block(getattr(stmt, field, None) or ())
        for handler in getattr(stmt, "handlers", None) or ():
            self.block(handler.body)
        for case in getattr(stmt, "cases", None) or ():
            self.block(case.body)

    def assign(self, target: ast.AST, value: ast.AST) -> None:
        if isinstance(target, ast.Name):
            found = self.modules_in(value)
            if found:
                self.flows.setdefault(target.id, set()).update(found)
            listed = self.listed(value)
            if listed:
                self.members.setdefault(target.id, set()).update(listed)
        elif isinstance(target, ast.Attribute) and target.attr == "requires_grad" and _false(value):
            owner = self.loop_owner(target.value)
            self.frozen.update(owner)

    def rebind(self, target: ast.AST, row: int, kept: FrozenSet[str] = frozenset()) -> None:
        for node in ast.walk(target):
            if isinstance(node, ast.Name) and node.id in self.watched and node.id not in kept:
                self.rebound.setdefault(node.id, set()).add(row)

    def call(self, node: ast.Call) -> None:
        func = node.func
        if not isinstance(func, ast.Attribute):
            return
        if func.attr == "requires_grad_" and node.args and not _true(node.args[0]):
            owner = dotted(func.value)
            into = self.frozen if _false(node.args[0]) else self.maybe
            if owner is not None:
                into.update(o for o in self.loops.get(owner, {owner}) if not o.startswith("<p>"))
                into.update(self.loop_owner(func.value))
            return
        if func.attr in _ADDS and isinstance(func.value, ast.Name) and node.args:
            value = node.args[-1]
            self.add(func.value.id, value, many=func.attr == "extend")

    def add(self, name: str, value: ast.AST, many: bool) -> None:
        found = self.modules_in(value)
        if found:
            self.flows.setdefault(name, set()).update(found)
        if many:
            listed = self.listed(value)
        else:
            spelled = dotted(value)
            listed = {spelled} if spelled is not None else set()
        if listed:
            self.members.setdefault(name, set()).update(listed)

    def loop(self, stmt: ast.AST) -> None:
        assert isinstance(stmt, (ast.For, ast.AsyncFor))
        saved = dict(self.loops)
        target = stmt.target
        if isinstance(target, ast.Tuple) and target.elts and isinstance(stmt.iter, ast.Call) and isinstance(stmt.iter.func, ast.Attribute) and stmt.iter.func.attr == "named_parameters":
            target = target.elts[-1]  # `for name, p in model.named_parameters()`
        if isinstance(target, ast.Name):
            walked = self.walked(stmt.iter)
            if walked:
                self.loops[target.id] = walked
                self.walks.setdefault(target.id, set()).update(walked)
            else:
                self.loops.pop(target.id, None)
            owner = self.parameters_of(stmt.iter)
            if owner:  # `for p in model.parameters(): p.requires_grad = False`, `params.append(p)`
                self.loops[target.id] = {f"<p>{o}" for o in owner}
        self.block(stmt.body)
        self.block(stmt.orelse)
        self.loops = saved

    # ------------------------------------------------------------------ values

    def modules_in(self, value: ast.AST) -> Set[str]:
        """The modules whose `.parameters()` appear in `value`, or that a name it reads holds."""
        out: Set[str] = set()
        for node in walk_expression(value):
            if isinstance(node, ast.Call):
                for owner in _owners(node):
                    out.update(self.loops.get(owner, {owner}))
            elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load):
                if node.id in self.flows:
                    out.update(self.flows[node.id])
                # a loop variable walking a module's parameters: `params.append(p)`
                out.update(f"<p>{o[3:]}" for o in self.loops.get(node.id, ()) if o.startswith("<p>"))
        return {o[3:] if o.startswith("<p>") else o for o in out}

    def listed(self, value: ast.AST) -> Set[str]:
        """The modules a list display or a list name holds (`[unet, text_encoder]`)."""
        if isinstance(value, (ast.List, ast.Tuple)):
            names = {dotted(e) for e in value.elts}
            return {n for n in names if n is not None}
        if isinstance(value, ast.Name):
            return set(self.members.get(value.id, ()))
        return set()

    def walked(self, iterable: ast.AST) -> Set[str]:
        return self.listed(iterable)

    def parameters_of(self, iterable: ast.AST) -> Set[str]:
        if isinstance(iterable, ast.Call) and isinstance(iterable.func, ast.Attribute) and iterable.func.attr in _PARAMETERS:
            owner = dotted(iterable.func.value)
            if owner is not None:
                return set(self.loops.get(owner, {owner}))
        return set()

    def loop_owner(self, node: ast.AST) -> Set[str]:
        """The modules whose parameter a loop variable `p` is (`for p in m.parameters()`)."""
        if isinstance(node, ast.Name):
            return {o[3:] for o in self.loops.get(node.id, ()) if o.startswith("<p>")}
        return set()


def _owners(call: ast.Call) -> Set[str]:
    """The modules whose parameters a call gives: `m.parameters()`, `m.named_parameters()`,
    `m.get_input_embeddings().parameters()` (a submodule's: part of `m`'s), and calls named for
    parameters made on or given a module (`network.prepare_optimizer_params(lr)`,
    `get_param_groups(model, lr)`): what they return goes to an optimizer only as parameters."""
    func = call.func
    name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
    if isinstance(func, ast.Attribute) and name in _PARAMETERS:
        base = func.value
        while isinstance(base, ast.Call) and isinstance(base.func, ast.Attribute):
            base = base.func.value  # `m.get_input_embeddings().parameters()`
        owner = dotted(base)
        return {owner} if owner is not None else set()
    if "param" not in name.lower() or name in _PARAMETERS:
        return set()
    # the receiver and the first argument: which one is the module is not known from the text
    # (a module's function or an object's method); only a name later cast and trained counts
    spelled = [dotted(func.value) if isinstance(func, ast.Attribute) else None, dotted(call.args[0]) if call.args else None]
    return {s for s in spelled if s is not None}


def _kept(target: ast.AST, value: ast.AST) -> FrozenSet[str]:
    """The names an assignment binds to the same module they held: accelerate's
    `model, optimizer = accelerator.prepare(model, optimizer)` (element i is argument i,
    wrapped, its parameters the same), `model = model.to(device)`."""
    if isinstance(value, ast.Call) and isinstance(value.func, ast.Attribute):
        if value.func.attr == "prepare":
            elts = target.elts if isinstance(target, (ast.Tuple, ast.List)) else [target]
            return frozenset(
                e.id for e, a in zip(elts, value.args) if isinstance(e, ast.Name) and isinstance(a, ast.Name) and a.id == e.id
            )
        if isinstance(target, ast.Name) and value.func.attr in ("to", "cuda", "train") and dotted(value.func.value) == target.id:
            return frozenset((target.id,))
    return frozenset()


def _true(node: Optional[ast.AST]) -> bool:
    return isinstance(node, ast.Constant) and node.value is True


def _false(node: Optional[ast.AST]) -> bool:
    return isinstance(node, ast.Constant) and node.value is False
