"""Uses of imported names (`ModuleContext.references`, `imported_names`).

A second traversal, run only when a rule asks: most files never need it."""
from __future__ import annotations

from typing import TYPE_CHECKING, Dict, List, Optional

import libcst as cst

from .names import ImportTable, dotted_name
from .types import Frame, Reference

if TYPE_CHECKING:  # pragma: no cover
    from .context import ModuleContext


def imported_names(ctx: "ModuleContext", node: cst.CSTNode) -> Dict[str, str]:
    """{local name: qualified name} for every imported name used in `node` that
    resolves unambiguously, so the verifier can bind a flagged snippet."""
    from .walk import subnodes

    found: Dict[str, str] = {}
    seen = set()
    for n in subnodes(node):  # not `node.visit`: a visitor rebuilds the whole subtree as it goes
        if isinstance(n, cst.Name) and n.value not in seen:
            seen.add(n.value)
            q = ctx.imports.qualname(n)
            if q is not None:
                found[n.value] = q
    return found


class _ReferenceCollector(cst.CSTVisitor):
    """Collects `Reference`s and the names bound other than by import.

    Branch frames mirror `_Collector`'s (if/else, try/except, loops) and are
    kept across function definitions, so a function defined under a version
    check counts as version-gated. Conditional expressions and the arguments of
    `getattr`/`hasattr` calls add an "if" frame whose test is that expression.

    A name bound in a class body (a class attribute `amp = False`, a method
    `def autocast`) is no binding for the code in the methods, which reach it
    only as `self.amp`: it makes the name ambiguous only where the class body
    itself uses it (`bound` gets it at the end of the module then).
    """

    def __init__(self, ctx: ModuleContext) -> None:
        super().__init__()
        self.ctx = ctx
        self.references: List[Reference] = []
        self.bound: set = set()
        self.path: List[Frame] = []
        self.skip: set = set()  # ids of Name nodes that are not references
        self.parents: List[cst.CSTNode] = []
        self.annotations = 0
        self.bodies: List[str] = []  # "class" / "def": the bodies the visit is in, innermost last
        self.class_bound: set = set()  # names bound directly in a class body
        self.class_used: set = set()  # roots of references made directly in a class body

    def visit_Annotation(self, node: cst.Annotation) -> None:
        self.annotations += 1

    def leave_Annotation(self, original_node: cst.Annotation) -> None:
        self.annotations -= 1

    def on_visit(self, node: cst.CSTNode) -> bool:
        self.parents.append(node)
        return super().on_visit(node)

    def on_leave(self, original_node: cst.CSTNode) -> None:
        super().on_leave(original_node)
        self.parents.pop()

    # -- not references
    def visit_Import(self, node: cst.Import) -> bool:
        return False

    def visit_ImportFrom(self, node: cst.ImportFrom) -> bool:
        return False

    def visit_Arg(self, node: cst.Arg) -> None:
        if node.keyword is not None:
            self.skip.add(id(node.keyword))

    def visit_Param(self, node: cst.Param) -> None:
        self.skip.add(id(node.name))
        self.bound.add(node.name.value)

    def visit_FunctionDef(self, node: cst.FunctionDef) -> None:
        self.skip.add(id(node.name))
        self._bind_name(node.name.value)

    def visit_ClassDef(self, node: cst.ClassDef) -> None:
        self.skip.add(id(node.name))
        self._bind_name(node.name.value)

    def visit_FunctionDef_body(self, node: cst.FunctionDef) -> None:
        self.bodies.append("def")

    def leave_FunctionDef_body(self, node: cst.FunctionDef) -> None:
        self.bodies.pop()

    def visit_ClassDef_body(self, node: cst.ClassDef) -> None:
        self.bodies.append("class")

    def leave_ClassDef_body(self, node: cst.ClassDef) -> None:
        self.bodies.pop()

    def leave_Module(self, original_node: cst.Module) -> None:
        self.bound |= self.class_bound & self.class_used

    def _in_class_body(self) -> bool:
        return bool(self.bodies) and self.bodies[-1] == "class"

    def _bind_name(self, name: str) -> None:
        (self.class_bound if self._in_class_body() else self.bound).add(name)

    def visit_AssignTarget(self, node: cst.AssignTarget) -> None:
        self._bind(node.target)

    def visit_AnnAssign(self, node: cst.AnnAssign) -> None:
        self._bind(node.target)

    def visit_AugAssign(self, node: cst.AugAssign) -> None:
        self._bind(node.target)

    def visit_For(self, node: cst.For) -> None:
        self._bind(node.target)

    def visit_AsName(self, node: cst.AsName) -> None:
        self._bind(node.name)

    def visit_NamedExpr(self, node: cst.NamedExpr) -> None:
        self._bind(node.target)

    def _bind(self, target: cst.CSTNode) -> None:
        if isinstance(target, cst.Name):
            self._bind_name(target.value)
            self.skip.add(id(target))
        elif isinstance(target, (cst.Tuple, cst.List)):
            for el in target.elements:
                self._bind(el.value)
        elif isinstance(target, cst.StarredElement):
            self._bind(target.value)

    # -- branches
    def visit_If_body(self, node: cst.If) -> None:
        self.path.append(Frame("if", node, node.test))

    def leave_If_body(self, node: cst.If) -> None:
        self.path.pop()

    def visit_If_orelse(self, node: cst.If) -> None:
        self.path.append(Frame("else", node, node.test))

    def leave_If_orelse(self, node: cst.If) -> None:
        self.path.pop()

    def visit_IfExp_body(self, node: cst.IfExp) -> None:
        self.path.append(Frame("if", node, node.test))

    def leave_IfExp_body(self, node: cst.IfExp) -> None:
        self.path.pop()

    def visit_IfExp_orelse(self, node: cst.IfExp) -> None:
        self.path.append(Frame("else", node, node.test))

    def leave_IfExp_orelse(self, node: cst.IfExp) -> None:
        self.path.pop()

    def visit_Try_body(self, node: cst.Try) -> None:
        self.path.append(Frame("try", node))

    def leave_Try_body(self, node: cst.Try) -> None:
        self.path.pop()

    def visit_ExceptHandler(self, node: cst.ExceptHandler) -> None:
        self.path.append(Frame("except", node, node.type))

    def leave_ExceptHandler(self, original_node: cst.ExceptHandler) -> None:
        self.path.pop()

    def visit_Try_orelse(self, node: cst.Try) -> None:
        self.path.append(Frame("try-else", node))

    def leave_Try_orelse(self, node: cst.Try) -> None:
        self.path.pop()

    def visit_For_body(self, node: cst.For) -> None:
        self.path.append(Frame("loop", node))

    def leave_For_body(self, node: cst.For) -> None:
        self.path.pop()

    def visit_While_body(self, node: cst.While) -> None:
        self.path.append(Frame("loop", node, node.test))

    def leave_While_body(self, node: cst.While) -> None:
        self.path.pop()

    def visit_Call_args(self, node: cst.Call) -> None:
        gate = isinstance(node.func, cst.Name) and node.func.value in ("getattr", "hasattr")
        self.path.append(Frame("if", node, node if gate else None))

    def leave_Call_args(self, node: cst.Call) -> None:
        self.path.pop()

    # -- references
    def visit_Attribute(self, node: cst.Attribute) -> Optional[bool]:
        self.skip.add(id(node.attr))
        if self._record(node):
            return False
        return None

    def visit_Name(self, node: cst.Name) -> None:
        if id(node) not in self.skip:
            self._record(node)

    def _record(self, node: cst.BaseExpression) -> bool:
        dotted = dotted_name(node)
        if dotted is None:
            return False
        qualnames = self.ctx.imports.resolve_dotted(dotted)
        if not qualnames:
            return False
        parent = self.parents[-2] if len(self.parents) >= 2 else None
        if isinstance(parent, (cst.AssignTarget, cst.AugAssign, cst.AnnAssign)) and parent.target is node:
            return True  # `torch.get_autocast_gpu_dtype = shim` replaces the name: no use of it
        if self._in_class_body():
            self.class_used.add(dotted.split(".")[0])
        use, call, decorator = "bare", None, None
        if isinstance(parent, cst.Call) and parent.func is node:
            use, call = "call", parent
            grand = self.parents[-3] if len(self.parents) >= 3 else None
            if isinstance(grand, cst.Decorator):
                decorator = grand
        elif isinstance(parent, cst.Decorator):
            use, decorator = "decorator", parent
        # `Call_args` frames are bookkeeping only; keep those with a test
        path = tuple(f for f in self.path if not (f.kind == "if" and f.test is None))
        self.references.append(
            Reference(
                node=node,
                qualnames=qualnames,
                root=dotted.split(".")[0],
                use=use,
                path=path,
                call=call,
                decorator=decorator,
                annotation=self.annotations > 0,
            )
        )
        return True
