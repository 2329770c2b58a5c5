"""What a name is bound to: the class a module object was constructed from
(and its family in this file), and the assignment of a name before a statement."""
from __future__ import annotations

from typing import TYPE_CHECKING, Dict, List, Optional, Set

import libcst as cst

from .names import dotted_name
from .types import Assignment, Scope

if TYPE_CHECKING:  # pragma: no cover
    from .context import ModuleContext


#: methods that return the module they are called on (`nn.Linear(4, 4).to(device)`)
_MODULE_CHAIN_METHODS = frozenset({"to", "cuda", "cpu", "float", "half", "bfloat16", "train", "eval", "requires_grad_"})


def constructed_class(ctx: ModuleContext, value: cst.CSTNode) -> Optional[str]:
    """`torch.nn.Linear` for `nn.Linear(4, 4)` or `nn.Linear(4, 4).to(device)`."""
    while (
        isinstance(value, cst.Call)
        and isinstance(value.func, cst.Attribute)
        and isinstance(value.func.value, cst.Call)
        and value.func.attr.value in _MODULE_CHAIN_METHODS
    ):
        value = value.func.value
    if isinstance(value, cst.Call):
        return ctx.qualname(value.func)
    return None


def module_class(ctx: ModuleContext, expr: cst.CSTNode, scope: Scope) -> Optional[str]:
    """The class of the object `expr` (`self.fc`, `lin`) names, when every
    assignment to it in reach constructs the same class; else None."""
    if isinstance(expr, cst.Call):
        return constructed_class(ctx, expr)
    dotted = dotted_name(expr)
    if dotted is None:
        return None
    if dotted.startswith("self."):
        if enclosing_class_name(scope) is None:
            return None  # a function taking `self` outside any class: which class is unknown
        candidates = self_bindings(ctx, dotted, scope)
    else:
        candidates = [a for a in ctx.assignments_to(dotted) if a.scope is scope]
        if not candidates:
            if dotted in scope.params:
                return None
            candidates = [a for a in ctx.assignments_to(dotted) if a.scope.is_module]
    classes = set()
    for a in candidates:
        cls = None if a.unpacked else constructed_class(ctx, a.value)
        if cls is None:
            return None
        classes.add(cls)
    return classes.pop() if len(classes) == 1 else None


def self_bindings(ctx: ModuleContext, dotted: str, scope: Scope) -> List[Assignment]:
    """The assignments to `self.X` (`dotted`) that code running in `scope` can see: from a
    method, those made in its class or in a base class defined in this file, never those of an
    unrelated class that happens to use the same attribute name. From a function outside any
    class that takes `self` (a method attached elsewhere) no class can be ruled out: all."""
    found = ctx.assignments_to(dotted)
    family = _class_family(ctx, scope)
    if not family:
        return found
    return [a for a in found if enclosing_class_name(a.scope) in family]


def sees_self_of(ctx: ModuleContext, reader: Scope, writer: Scope) -> bool:
    """Whether `self.X` set in `writer` can be what `self.X` means in `reader` (as in
    `self_bindings`: `writer` is in `reader`'s class or a base here, or `reader` is in no class)."""
    family = _class_family(ctx, reader)
    return not family or enclosing_class_name(writer) in family


def enclosing_class_name(scope: Optional[Scope]) -> Optional[str]:
    while scope is not None:
        if scope.cls is not None:
            return scope.cls.name.value
        scope = scope.parent
    return None


def _class_family(ctx: ModuleContext, scope: Scope) -> Set[str]:
    """The name of the class `scope` is a method of (through nested functions) and of its base
    classes defined in this file, transitively; empty outside any class."""
    name = enclosing_class_name(scope)
    if name is None:
        return set()
    bases: Dict[str, List[str]] = {}
    for c in ctx.classes:  # every class of that name (a file may define one twice)
        bases.setdefault(c.name.value, []).extend(b.value.value for b in c.bases if isinstance(b.value, cst.Name))
    family, todo = set(), [name]
    while todo:
        current = todo.pop()
        if current not in family:
            family.add(current)
            todo.extend(bases.get(current, ()))
    return family


def assignment_before(ctx: ModuleContext, name: str, scope: Scope, statement: cst.CSTNode, order: int) -> Optional[Assignment]:
    """The last assignment to `name` in `scope` in an earlier statement than
    `statement` (source order; loops are not unrolled)."""
    found = None
    for a in ctx.assignments_to(name):
        if a.scope is scope and a.order < order and a.statement is not statement:
            if found is None or a.order > found.order:
                found = a
    return found
