"""The one traversal that fills the AMP model: imports, calls, assignments,
scopes, autocast regions, literals, matmuls, dtype references.

`walk.py` calls the visitor hooks libcst's `visit` would, without rebuilding
nodes; the collector keeps the branch path and the innermost autocast region
of every statement as it goes."""
from __future__ import annotations

from typing import TYPE_CHECKING, Dict, List, Optional, Set, Tuple, Union

import libcst as cst

from . import torchapi
from .literals import evaluated, literal_number
from .names import dotted_name
from .regions import _parse_autocast, held_autocast
from .types import Assignment, AutocastRegion, CallInfo, Frame, LiteralInfo, MatMulInfo, Scope
from .walk import own_hook

if TYPE_CHECKING:  # pragma: no cover
    from .context import ModuleContext


# --------------------------------------------------------------------------- traversal


def _collect_imports(ctx: ModuleContext) -> None:
    """Imports anywhere in the file (module level, functions, classes, try/except).

    Imports are statements, so only statement bodies are walked; expressions
    never hold them.
    """
    imports = ctx.imports
    stack: List[cst.CSTNode] = [ctx.module]
    while stack:
        node = stack.pop()
        if isinstance(node, cst.SimpleStatementLine):
            for small in node.body:
                if isinstance(small, cst.Import):
                    imports.add_import(small)
                elif isinstance(small, cst.ImportFrom):
                    imports.add_import_from(small)
            continue
        for part in _statement_children(node):
            stack.append(part)
    imports.bind_star_torch()


def _statement_children(node: cst.CSTNode) -> List[cst.CSTNode]:
    """The statements directly inside `node` (bodies, orelse, handlers, finally, cases)."""
    out: List[cst.CSTNode] = []
    body = getattr(node, "body", None)
    if isinstance(body, (tuple, list)):
        out.extend(body)
    elif isinstance(body, cst.BaseSuite):
        if isinstance(body, cst.IndentedBlock):
            out.extend(body.body)
        else:  # SimpleStatementSuite: `if x: import y`
            out.append(cst.SimpleStatementLine(body=body.body))
    for attr in ("orelse", "finalbody"):
        extra = getattr(node, attr, None)
        if extra is not None:
            out.append(extra)
    handlers = getattr(node, "handlers", None)
    if handlers:
        out.extend(handlers)
    cases = getattr(node, "cases", None)
    if cases:
        out.extend(cases)
    return out


def _module_autocast_aliases(ctx: ModuleContext, is_autocast) -> Dict[str, Tuple[cst.BaseExpression, bool]]:
    """`name -> (value, conditional)` for each plain name the module level (its `if`/`try`/`with`/
    loop bodies, not its functions or classes) binds to an autocast context: `autocast(...)`,
    `autocast(...) if c else nullcontext()`, `{...: autocast(...)}[key]` (the last such binding).
    `conditional`: the module binds the name to something else too (`if args.amp: ctx =
    autocast(...)` / `else: ctx = nullcontext()`), so a function may read either: on at run time."""
    found: Dict[str, cst.BaseExpression] = {}
    other: Set[str] = set()
    stack: List[cst.CSTNode] = [ctx.module]
    while stack:
        node = stack.pop()
        if isinstance(node, (cst.FunctionDef, cst.ClassDef)):
            continue
        if isinstance(node, cst.SimpleStatementLine):
            for small in node.body:
                targets: List[cst.BaseExpression] = []
                value: Optional[cst.BaseExpression] = None
                if isinstance(small, cst.Assign):
                    targets, value = [t.target for t in small.targets], small.value
                elif isinstance(small, (cst.AnnAssign, cst.AugAssign)) and small.value is not None:
                    targets, value = [small.target], small.value
                for target in targets:
                    for name in _bound_names(target):
                        if isinstance(target, cst.Name) and isinstance(small, cst.Assign) and _autocast_value(value, is_autocast):
                            found[name] = value  # type: ignore[assignment]
                        else:
                            other.add(name)
            continue
        stack.extend(_statement_children(node))
    return {name: (value, name in other) for name, value in found.items()}


def _bound_names(target: cst.BaseExpression) -> List[str]:
    if isinstance(target, cst.Name):
        return [target.value]
    if isinstance(target, (cst.Tuple, cst.List)):
        return [n for el in target.elements for n in _bound_names(el.value)]
    return []


def _autocast_value(value: Optional[cst.BaseExpression], is_autocast) -> bool:
    """A value the collector keeps as an autocast alias (`_record_target_one`)."""
    if isinstance(value, cst.Call):
        return is_autocast(value)
    if isinstance(value, cst.IfExp):
        return any(isinstance(side, cst.Call) and is_autocast(side) for side in (value.body, value.orelse))
    return isinstance(value, cst.Subscript) and isinstance(value.value, cst.Dict) and any(
        isinstance(e, cst.DictElement) and isinstance(e.value, cst.Call) and is_autocast(e.value) for e in value.value.elements
    )


_STATEMENT_TYPES = (cst.SimpleStatementLine, cst.BaseCompoundStatement)
#: per node type: (visit hook, leave hook, is a statement), looked up once per type
_HOOKS: Dict[type, Tuple[Optional[object], Optional[object], bool]] = {}


class _Collector(cst.CSTVisitor):
    def __init__(self, ctx: ModuleContext) -> None:
        super().__init__()
        self.ctx = ctx
        module_scope = Scope(node=ctx.module, name="<module>", cls=None, parent=None)
        ctx.scopes.append(module_scope)
        self.scope = self.module_scope = module_scope
        self.classes: List[cst.ClassDef] = []
        self.path: List[Frame] = []
        self.region: Optional[AutocastRegion] = None
        self.statement: cst.CSTNode = ctx.module
        self.order = 0
        self.stack: List[cst.CSTNode] = []
        self.call_stack: List[CallInfo] = []
        self._statements: List[cst.CSTNode] = []
        # per-scope `name = torch.autocast(...)` so `with name:` is understood
        self._autocast_aliases: Dict[Tuple[int, str], cst.Call] = {}
        #: (scope, name) -> (the autocast a name holds as a callable, whether only on some path)
        self._held_autocasts: Dict[Tuple[int, str], Tuple[str, bool]] = {}
        self._bound_otherwise: Set[Tuple[int, str]] = set()
        #: the module's autocast contexts bound by name anywhere at module level, for the functions
        #: defined above the binding (`def train(): with autocast_ctx:` and, below it, `if __name__ ==
        #: "__main__": autocast_ctx = autocast(...)`): a function reads the global when it runs
        self._late_aliases = _module_autocast_aliases(ctx, self._is_autocast_call)

    # -- bookkeeping shared by every node

    def on_visit(self, node: cst.CSTNode) -> bool:
        self.stack.append(node)
        hooks = _HOOKS.get(type(node))
        if hooks is None:
            hooks = self._hooks(node)
        if hooks[2]:
            self._statements.append(self.statement)
            self.statement = node
        if hooks[0] is not None:
            return hooks[0](self, node) is not False
        return True

    def on_leave(self, original_node: cst.CSTNode) -> None:
        hooks = _HOOKS[type(original_node)]
        if hooks[1] is not None:
            hooks[1](self, original_node)
        self.stack.pop()
        if hooks[2]:
            self.statement = self._statements.pop()

    @staticmethod
    def _hooks(node: cst.CSTNode) -> Tuple[Optional[object], Optional[object], bool]:
        name = type(node).__name__
        hooks = (
            own_hook(_Collector, f"visit_{name}"),
            own_hook(_Collector, f"leave_{name}"),
            isinstance(node, _STATEMENT_TYPES),
        )
        _HOOKS[type(node)] = hooks
        return hooks

    def _next(self) -> int:
        self.order += 1
        return self.order

    # -- scopes

    def visit_ClassDef(self, node: cst.ClassDef) -> None:
        self.classes.append(node)
        self.ctx.classes.append(node)

    def leave_ClassDef(self, original_node: cst.ClassDef) -> None:
        self.classes.pop()

    def visit_FunctionDef(self, node: cst.FunctionDef) -> None:
        params = tuple(
            p.name.value
            for p in (
                *node.params.posonly_params,
                *node.params.params,
                *node.params.kwonly_params,
            )
        )
        cls = self.classes[-1] if self.classes and self._directly_in_class(node) else None
        scope = Scope(node=node, name=node.name.value, cls=cls, parent=self.scope, params=params)
        self.ctx.scopes.append(scope)
        self._saved = getattr(self, "_saved", [])
        self._saved.append((self.scope, self.path, self.region))
        self.scope = scope
        self.path = []
        region = self._decorator_region(node)
        if region is not None:
            self.region = region

    def leave_FunctionDef(self, original_node: cst.FunctionDef) -> None:
        self.scope, self.path, self.region = self._saved.pop()

    def _directly_in_class(self, node: cst.FunctionDef) -> bool:
        # stack: ..., ClassDef, IndentedBlock, FunctionDef
        return len(self.stack) >= 3 and isinstance(self.stack[-3], cst.ClassDef)

    def visit_Lambda(self, node: cst.Lambda) -> bool:
        return True

    def visit_Return(self, node: cst.Return) -> None:
        # read after every assignment so far (`known_dtype`'s `before` counts those below it)
        self.scope.returns.append((node.value, self.order + 1))

    def visit_Yield(self, node: cst.Yield) -> None:
        self.scope.generator = True

    # -- control flow

    def _push(self, frame: Frame) -> None:
        self.path.append(frame)

    def _pop(self) -> None:
        self.path.pop()

    def visit_If_body(self, node: cst.If) -> None:
        self._push(Frame("if", node, node.test))

    def leave_If_body(self, node: cst.If) -> None:
        self._pop()

    def visit_If_orelse(self, node: cst.If) -> None:
        self._push(Frame("else", node, node.test))

    def leave_If_orelse(self, node: cst.If) -> None:
        self._pop()

    def visit_For_body(self, node: cst.For) -> None:
        self._push(Frame("loop", node))

    def leave_For_body(self, node: cst.For) -> None:
        self._pop()

    def visit_For_orelse(self, node: cst.For) -> None:
        self._push(Frame("loop-else", node))

    def leave_For_orelse(self, node: cst.For) -> None:
        self._pop()

    def visit_While_body(self, node: cst.While) -> None:
        self._push(Frame("loop", node, node.test))

    def leave_While_body(self, node: cst.While) -> None:
        self._pop()

    def visit_While_orelse(self, node: cst.While) -> None:
        self._push(Frame("loop-else", node))

    def leave_While_orelse(self, node: cst.While) -> None:
        self._pop()

    def visit_Try_body(self, node: cst.Try) -> None:
        self._push(Frame("try", node))

    def leave_Try_body(self, node: cst.Try) -> None:
        self._pop()

    def visit_ExceptHandler(self, node: cst.ExceptHandler) -> None:
        self._push(Frame("except", node, node.type))

    def leave_ExceptHandler(self, original_node: cst.ExceptHandler) -> None:
        self._pop()

    def visit_Try_orelse(self, node: cst.Try) -> None:
        self._push(Frame("try-else", node))

    def leave_Try_orelse(self, node: cst.Try) -> None:
        self._pop()

    def visit_Try_finalbody(self, node: cst.Try) -> None:
        self._push(Frame("finally", node))

    def leave_Try_finalbody(self, node: cst.Try) -> None:
        self._pop()

    # -- autocast regions

    def visit_With_body(self, node: cst.With) -> None:
        self._region_saved = getattr(self, "_region_saved", [])
        self._region_saved.append(self.region)
        for item in node.items:
            region = self._region_for(item.item, node)
            if region is not None:
                self.region = region
                self.ctx.regions.append(region)

    def leave_With_body(self, node: cst.With) -> None:
        self.region = self._region_saved.pop()

    def _decorator_region(self, node: cst.FunctionDef) -> Optional[AutocastRegion]:
        region = None
        for dec in node.decorators:
            r = self._region_for(dec.decorator, node)
            if r is not None:
                self.ctx.regions.append(r)
                region = r
        return region

    def _region_for(self, expr: cst.BaseExpression, node: cst.CSTNode) -> Optional[AutocastRegion]:
        conditional = False
        if isinstance(expr, cst.Name):
            aliased = self._alias(expr.value)
            if aliased is None:
                late = self._late_alias(expr.value)
                if late is None:
                    return None
                aliased, conditional = late  # bound at module level below this function: read when it runs
            expr = aliased
        if isinstance(expr, cst.Subscript):
            region = self._selected_region(expr, node)
            if region is not None and conditional:
                region.enabled = None if region.enabled is not False else False
            return region
        if isinstance(expr, cst.Call) and isinstance(expr.func, cst.Name) and not self.ctx.imports.is_imported(expr.func.value):
            held = self._held(expr.func.value)
            if held is not None:  # `autocast = torch.cuda.amp.autocast if amp else suppress; with autocast():`
                q, conditional = held
                region = _parse_autocast(self.ctx, expr, node, self.region, held=q)
                if region is not None and conditional:
                    region.enabled = None if region.enabled is not False else False
                return region
        if isinstance(expr, cst.IfExp):
            # `autocast(...) if use_amp else nullcontext()`
            for side in (expr.body, expr.orelse):
                if isinstance(side, cst.Call) and self._is_autocast_call(side):
                    expr, conditional = side, True
                    break
            else:
                return None
        if not isinstance(expr, cst.Call):
            return None
        region = _parse_autocast(self.ctx, expr, node, self.region)
        if region is not None and conditional:
            region.enabled = None if region.enabled is not False else False
        return region

    def _selected_region(self, expr: cst.Subscript, node: cst.CSTNode) -> Optional[AutocastRegion]:
        """`with {"bf16": autocast(dtype=torch.bfloat16), "fp16": autocast(dtype=torch.float16),
        "fp32": nullcontext()}[args.precision]:`: the context picked at run time from a dict
        literal with autocast values. One region: its dtype the one every autocast value spells,
        else decided at run time (the candidates: `region_dtype_choices`, by the key's choices);
        on at run time when another value is no autocast."""
        if not isinstance(expr.value, cst.Dict):
            return None
        autocasts: List[AutocastRegion] = []
        selected: List[Tuple[cst.DictElement, AutocastRegion]] = []
        other = False
        for element in expr.value.elements:
            if not isinstance(element, cst.DictElement):
                return None  # `**base`: values not spelled here
            parsed = _parse_autocast(self.ctx, element.value, node, self.region) if isinstance(element.value, cst.Call) else None
            if parsed is None or parsed.framework:
                other = True
            else:
                autocasts.append(parsed)
                selected.append((element, _parse_autocast(self.ctx, element.value, node, self.region)))  # type: ignore[arg-type]
        if not autocasts:
            return None
        region = autocasts[0]
        region.selector = expr
        region.selected = tuple(selected)
        if len({r.dtype for r in autocasts}) != 1:
            region.dtype = None
        if len({r.device for r in autocasts}) != 1:
            region.device = None
        states = {r.enabled for r in autocasts} | ({False} if other else set())
        region.enabled = states.pop() if len(states) == 1 else None
        return region

    def _held(self, name: str) -> Optional[Tuple[str, bool]]:
        """The autocast a name bound in this scope (else at module level) holds as a callable, and
        whether it holds it only on one side of a condition."""
        held = self._held_autocasts.get((id(self.scope), name))
        if held is None and self.scope is not self.module_scope:
            if name in self.scope.params or (id(self.scope), name) in self._bound_otherwise:
                return None  # the function's own name (a parameter, a local binding), not the module's
            held = self._held_autocasts.get((id(self.module_scope), name))
        return held

    def _alias(self, name: str) -> Optional[cst.BaseExpression]:
        """The autocast (or `autocast(...) if c else nullcontext()`) bound to `name` in this
        scope, else at module level (`ctx = ...` at the top of a script, `with ctx:` in its
        functions)."""
        aliased = self._autocast_aliases.get((id(self.scope), name))
        if aliased is None and self.scope is not self.module_scope:
            aliased = self._autocast_aliases.get((id(self.module_scope), name))
        return aliased

    def _late_alias(self, name: str) -> Optional[Tuple[cst.BaseExpression, bool]]:
        """In a function, the autocast the module binds `name` to below it (`_module_autocast_aliases`),
        unless the function has a name of its own (a parameter, a binding before the read)."""
        if self.scope is self.module_scope or name in self.scope.params or (id(self.scope), name) in self._bound_otherwise:
            return None
        if (id(self.scope), name) in self._held_autocasts:
            return None
        return self._late_aliases.get(name)

    def _is_autocast_call(self, call: cst.Call) -> bool:
        return _parse_autocast(self.ctx, call, call, None) is not None

    # -- calls, assignments, literals

    def visit_Call(self, node: cst.Call) -> None:
        func = node.func
        method = receiver = receiver_dotted = None
        if isinstance(func, cst.Attribute):
            method = func.attr.value
            receiver = func.value
            receiver_dotted = dotted_name(receiver)
        info = CallInfo(
            node=node,
            order=self._next(),
            qualnames=self.ctx.imports.qualnames(func),
            dotted=dotted_name(func),
            method=method,
            receiver=receiver,
            receiver_dotted=receiver_dotted,
            scope=self.scope,
            path=tuple(self.path),
            region=self.region,
            statement=self.statement,
        )
        self.ctx.calls.append(info)
        self.scope.calls.append(info)
        self.call_stack.append(info)

    def leave_Call(self, original_node: cst.Call) -> None:
        self.call_stack.pop()

    def visit_Assign(self, node: cst.Assign) -> None:
        for target in node.targets:
            self._record_target(target.target, node.value, node)

    def visit_AnnAssign(self, node: cst.AnnAssign) -> None:
        if node.value is not None:
            self._record_target(node.target, node.value, node)

    def _record_target(self, target: cst.BaseExpression, value: cst.BaseExpression, node: cst.CSTNode) -> None:
        if isinstance(target, (cst.Tuple, cst.List)):
            for el in target.elements:
                self._record_target_one(el.value, value, node, unpacked=True)
        else:
            self._record_target_one(target, value, node, unpacked=False)

    def _record_target_one(self, target: cst.BaseExpression, value: cst.BaseExpression, node: cst.CSTNode, unpacked: bool) -> None:
        name = dotted_name(target)
        if name is None:
            return
        self.ctx.assignments.append(
            Assignment(
                target=name,
                value=value,
                node=node,
                order=self._next(),
                scope=self.scope,
                path=tuple(self.path),
                region=self.region,
                unpacked=unpacked,
                statement=self.statement,
            )
        )
        if not unpacked and isinstance(value, cst.Call) and _parse_autocast(self.ctx, value, value, None):
            self._autocast_aliases[(id(self.scope), name)] = value
        elif not unpacked and isinstance(value, cst.IfExp) and any(
            isinstance(side, cst.Call) and self._is_autocast_call(side) for side in (value.body, value.orelse)
        ):  # `ctx = autocast(...) if device_type == "cuda" else nullcontext()`
            self._autocast_aliases[(id(self.scope), name)] = value
        elif not unpacked and isinstance(value, cst.Subscript) and isinstance(value.value, cst.Dict):
            self._autocast_aliases[(id(self.scope), name)] = value  # `ctx = {"fp16": autocast(...), ...}[args.x]`
        key = (id(self.scope), name)
        q = held_autocast(self.ctx, value) if not unpacked and isinstance(value, (cst.Name, cst.Attribute, cst.IfExp)) else None
        if q is not None:
            # on some path only: one side of `a if c else b`, or the name bound otherwise too
            # (`if amp: ac = torch.autocast` / `else: ac = suppress`, in either order)
            some = isinstance(value, cst.IfExp) or key in self._bound_otherwise or key in self._held_autocasts
            self._held_autocasts[key] = (q, some)
        else:
            self._bound_otherwise.add(key)
            if key in self._held_autocasts:
                self._held_autocasts[key] = (self._held_autocasts[key][0], True)

    def visit_BinaryOperation(self, node: cst.BinaryOperation) -> None:
        if isinstance(node.operator, cst.MatrixMultiply):
            self.ctx.matmuls.append(
                MatMulInfo(node, self._next(), self.scope, tuple(self.path), self.region, self.statement)
            )

    def visit_Attribute(self, node: cst.Attribute) -> Optional[bool]:
        qualnames = self.ctx.imports.qualnames(node)
        for q in sorted(qualnames):  # sorted: the first dtype found must not follow the hash seed
            d = torchapi.dtype_of_qualname(q)
            if d in ("fp16", "bf16"):
                self.ctx.dtype_refs.append((d, node))
                break
        return None

    def visit_Float(self, node: cst.Float) -> None:
        self._number(node)

    def visit_Integer(self, node: cst.Integer) -> None:
        self._number(node)

    def _number(self, node: Union[cst.Float, cst.Integer]) -> None:
        try:
            value = abs(float(evaluated(node)))
        except (ValueError, OverflowError):
            return
        if not (value > torchapi.FP16_MAX or 0 < value < torchapi.FP16_FLUSH_TO_ZERO):
            return
        # stack[-1] is the number itself
        outer: cst.BaseExpression = node
        i = len(self.stack) - 2
        while i >= 0:
            p = self.stack[i]
            if isinstance(p, cst.UnaryOperation) and isinstance(p.operator, (cst.Minus, cst.Plus)):
                outer = p
                i -= 1
                continue
            break
        number = literal_number(outer)
        if number is None:
            return
        parents = tuple(reversed(self.stack[max(0, i - 8) : i + 1]))
        call = keyword = position = None
        if parents and isinstance(parents[0], cst.Arg) and self.call_stack:
            arg = parents[0]
            call = self.call_stack[-1]
            if arg.keyword is not None:
                keyword = arg.keyword.value
            else:
                position = next(
                    (k for k, a in enumerate(a for a in call.node.args if a.keyword is None) if a is arg),
                    None,
                )
        self.ctx.literals.append(
            LiteralInfo(
                node=outer,
                value=number,
                parents=parents,
                call=call,
                keyword=keyword,
                position=position,
                scope=self.scope,
                path=tuple(self.path),
                region=self.region,
                statement=self.statement,
                order=self.order,
            )
        )
