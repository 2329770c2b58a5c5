"""The AMP model of one module, computed once and shared by every rule.

One traversal of the libcst tree records what AMP rules ask about:

* every call, with the qualified names its callee may refer to (`names.py`),
  the function it sits in, its branch path (if/else, loops, try/except) and the
  innermost autocast region around it;
* autocast regions (`with` items and decorators) with device, dtype, enabled;
* assignments (so rules can follow `scaler = GradScaler(...)`,
  `criterion = nn.BCELoss()`, `model = model.half()`);
* numeric literals outside fp16's range (huge or tiny) with where they are used;
* classes and functions.

After the traversal it derives GradScaler and optimizer bindings (names,
`self.` attributes and parameters), low-precision casts, the ordered
training-step events of every function, and the file's project facts.

Positions are resolved lazily, one top-level statement at a time
(`model/positions.py`): most parsed files have no finding, and libcst's
whole-module PositionProvider pass costs as much as the traversal.
"""
from __future__ import annotations

import re
from typing import Dict, FrozenSet, List, Optional, Sequence, Tuple

import libcst as cst

from ..core.config import Config
from ..core.diagnostics import Diagnostic, Fix, Location, Related, Severity
from . import torchapi
from .collector import _Collector, _collect_imports
from .dtypes import (
    _ALIGNING_FUNCTIONS, _CAST_METHOD_DTYPES, _DTYPE_KEEPING_FUNCTIONS, _SOFTMAX_FUNCTIONS, _SOFTMAX_METHODS, _DTYPE_KEEPING_METHODS, _DTYPED_FACTORIES,
    _FLOAT_FACTORIES, _LIKE_FACTORIES, _OTHER_DTYPES, _PROMOTING_FUNCTIONS, _TYPED_CONSTRUCTORS, _SPLITTING_FUNCTIONS,
    _SPLITTING_METHODS, _find_low_precision_casts, _is_device_expr, cast_inputs_dtype, module_state_dtype,
)
from .events import _events
from .facts import FileFacts
from .literals import call_arg, literal_string
from .names import ImportTable
from .references import _ReferenceCollector
from .regions import AutocastOp, replays_autocast
from .scalers import _find_optimizers, _find_scalers
from .types import (
    Assignment, AutocastRegion, CallInfo, Event, LiteralInfo, LowPrecisionCast, MatMulInfo, OptimizerInfo, Path,
    Reference, ScalerInfo, Scope,
)
from .walk import parent_map, subnodes, walk


#: tests that pick code by torch version or API presence (not `is_torch_tpu_available()`,
#: which chooses hardware, not an API generation)
_VERSION_TEST = re.compile(
    r"version|is_torch_(?:greater|less|version)|(?:greater|less)_(?:or_)?(?:equal_)?than|TORCH_\w*\d"
)
#: `hasattr(obj, "name")` / `getattr(obj, "name", ...)`: a feature probe only when it asks torch (or an
#: amp module) for something, or asks anything for an AMP name; `hasattr(pl_module, "log_images")` is not
_ATTR_PROBE = re.compile(r"\b(?:has|get)attr\s*\(\s*([^,()]*)\s*,\s*([^,()]*)")
_PROBED_AMP_NAME = re.compile(r"amp|autocast|[Ss]caler|custom_(?:fwd|bwd)|bfloat16|float16|bf16|fp16")


def is_version_test(text: str) -> bool:
    """`text` picks code by torch version or by the presence of a torch/AMP API."""
    if _VERSION_TEST.search(text):
        return True
    for obj, attr in _ATTR_PROBE.findall(text):
        if "torch" in obj or "amp" in obj.lower() or _PROBED_AMP_NAME.search(attr):
            return True
    return False
_IMPORT_ERRORS = ("ImportError", "AttributeError", "ModuleNotFoundError")
_OPTIMIZER_NAMES = ("optimizer", "optim", "opt")

# --------------------------------------------------------------------------- context


class ModuleContext:
    """The AMP model of one module. Build with `ModuleContext.build(...)`."""

    def __init__(self, module: cst.Module, source: str, path: str, config: Optional[Config] = None) -> None:
        self.module = module
        #: the effective configuration (rules read e.g. `config.torch_version` for fixes)
        self.config = config or Config()
        self.source = source
        self.path = path
        self.imports = ImportTable()
        self.calls: List[CallInfo] = []
        self.assignments: List[Assignment] = []
        self.regions: List[AutocastRegion] = []
        self.literals: List[LiteralInfo] = []
        self.matmuls: List[MatMulInfo] = []
        self.scopes: List[Scope] = []
        self.classes: List[cst.ClassDef] = []
        self.dtype_refs: List[Tuple[str, cst.CSTNode]] = []  # ("fp16", node) for torch.float16 etc.
        self.scalers: Dict[str, ScalerInfo] = {}
        self.optimizers: Dict[str, OptimizerInfo] = {}
        self.low_precision_casts: List[LowPrecisionCast] = []
        self.facts = FileFacts()
        self._positions = None
        self._name_dtypes = None
        self._returned_dtypes: Dict[int, Optional[str]] = {}  # callee scope -> `_returned_dtype`
        self._dtype_names: Dict[Tuple[int, str], Optional[str]] = {}  # (scope, name) -> `dtype_value`
        self._parents = None
        self._calls_by_qualname: Dict[str, List[CallInfo]] = {}
        self._calls_by_method: Dict[str, List[CallInfo]] = {}
        self._call_info: Dict[cst.Call, CallInfo] = {}
        self._assignments_by_target: Dict[str, List[Assignment]] = {}
        self._references: Optional[List["Reference"]] = None
        self._rebound: FrozenSet[str] = frozenset()
        self._autocast_ops: Optional[List["AutocastOp"]] = None
        self._autocast_op_by_node: Dict[cst.CSTNode, "AutocastOp"] = {}
        self._callers: Optional[Dict[int, List[CallInfo]]] = None
        self._scopes_by_name: Optional[Dict[str, List[Scope]]] = None

    # ------------------------------------------------------------------ build

    @classmethod
    def build(cls, module: cst.Module, source: str, path: str = "<string>", config: Optional[Config] = None) -> "ModuleContext":
        ctx = cls(module, source, path, config)
        _collect_imports(ctx)
        walk(module, _Collector(ctx))
        for call in ctx.calls:
            for q in call.qualnames:
                ctx._calls_by_qualname.setdefault(q, []).append(call)
            if call.method:
                ctx._calls_by_method.setdefault(call.method, []).append(call)
            ctx._call_info[call.node] = call
        for a in ctx.assignments:
            ctx._assignments_by_target.setdefault(a.target, []).append(a)
        _find_scalers(ctx)
        _find_optimizers(ctx)
        _find_low_precision_casts(ctx)
        for scope in ctx.scopes:
            scope.events = _events(ctx, scope)
        ctx.facts = _file_facts(ctx)
        return ctx

    def release(self) -> None:
        """Drop everything this context holds, and the links from scopes to their calls and
        events (each call links back to its scope).

        With no cycle left through the model, it and the libcst tree it holds
        are freed by reference counting as soon as the caller drops them,
        instead of waiting for the cycle collector to scan a few hundred
        thousand objects. The context must not be used afterwards.
        """
        for scope in self.scopes:
            scope.calls = []
            scope.events = []
        self.__dict__.clear()

    # ------------------------------------------------------------------ names

    def qualnames(self, node: cst.CSTNode) -> FrozenSet[str]:
        return self.imports.qualnames(node)

    def qualname(self, node: cst.CSTNode) -> Optional[str]:
        return self.imports.qualname(node)

    def dtype_of(self, node: Optional[cst.CSTNode]) -> Optional[str]:
        """'fp16' | 'bf16' | 'fp32' for `torch.float16`, `th.half`, `"float16"`..."""
        if node is None:
            return None
        s = literal_string(node)
        if s is not None:
            return torchapi.DTYPE_STRINGS.get(s.replace("torch.", ""))
        for q in sorted(self.qualnames(node)):  # sorted: the first dtype found must not follow the hash seed
            d = torchapi.dtype_of_qualname(q)
            if d:
                return d
        return None

    def known_dtype(
        self,
        node: Optional[cst.CSTNode],
        scope: Optional[Scope] = None,
        before: Optional[int] = None,
        statement: Optional[cst.CSTNode] = None,
        _depth: int = 0,
        path: Optional[Path] = None,
    ) -> Optional[str]:
        """The floating dtype an expression visibly has: 'fp16' | 'bf16' | 'fp32' |
        'other' (float64, integer, bool) | None (unknown).

        Follows casts (`.half()`, `.float()`, `.to(torch.float16)`), factories
        (`torch.zeros(n)` is the default fp32, `dtype=` wins, `*_like` inherit),
        dtype-preserving methods (`view`, `triu`, `unsqueeze`, `to(device)`, ...),
        `arange`/`full`/`tensor` with `dtype=`, the pieces of `meshgrid` and of
        splits (`chunk`, `unbind`: the dtype of each piece), arithmetic (below)
        and plain names assigned in `scope` before order `before` (every such
        assignment must agree; the one in `statement` itself is ignored). It
        assumes the default dtype is float32 and never guesses otherwise.
        With `path` (the control flow around the point asked about), a name's value
        is read flow-sensitively: an earlier assignment that every way to the point
        runs through hides the ones before it (model/dtype_flow.py). A parameter of a
        `custom_fwd(cast_inputs=torch.float32)` forward not rebound before is fp32.

        Arithmetic (`+ - * /`) follows type promotion: a Python number keeps a
        float tensor's dtype, two alike tensors keep it, and an fp32 tensor lifts
        the other operand to (at least) fp32: `fp16_mask * fp32_grid` is fp32.
        The one exception, a 0-dim fp32 tensor times a dimensioned fp16 one
        (which stays fp16), cannot be told apart here; the rules only use an
        fp32 answer to stay silent, so that case costs a finding, never a false one.
        """
        if node is None or _depth > 10:
            return None
        again = lambda n, b=before: self.known_dtype(n, scope, b, statement, _depth + 1, path)  # noqa: E731
        if isinstance(node, cst.Call):
            func = node.func
            method = func.attr.value if isinstance(func, cst.Attribute) else None
            qualnames = self.qualnames(func)
            if method in _CAST_METHOD_DTYPES and not node.args and not qualnames:
                return _CAST_METHOD_DTYPES[method]
            dtype_arg = call_arg(node, None, "dtype")
            if method in ("to", "type") and not qualnames:
                for arg in node.args:
                    if arg.keyword is None or arg.keyword.value == "dtype":
                        d = self.dtype_value(arg.value, scope)
                        if d is not None:
                            return d
                positional = [a.value for a in node.args if a.keyword is None]
                if all(_is_device_expr(self, a) for a in positional):
                    return again(func.value)
                return None
            typed = {_TYPED_CONSTRUCTORS[q] for q in qualnames if q in _TYPED_CONSTRUCTORS}
            if len(typed) == 1:
                return typed.pop()
            if qualnames & _FLOAT_FACTORIES:
                if dtype_arg is not None:
                    return self.dtype_value(dtype_arg, scope)
                return "fp32"
            if qualnames & _DTYPED_FACTORIES:
                return self.dtype_value(dtype_arg, scope) if dtype_arg is not None else None
            if qualnames & _ALIGNING_FUNCTIONS:
                inputs = [a.value for a in node.args if a.keyword is None]
                if len(inputs) == 1 and isinstance(inputs[0], (cst.List, cst.Tuple)):
                    inputs = [e.value for e in inputs[0].elements]
                dtypes = {again(i) for i in inputs}
                return dtypes.pop() if len(dtypes) == 1 else None
            if qualnames & _PROMOTING_FUNCTIONS:
                tensors = call_arg(node, 0, "tensors")
                if isinstance(tensors, (cst.List, cst.Tuple)):
                    return _promote_all([again(e.value) for e in tensors.elements if not isinstance(e, cst.StarredElement)])
                return None
            if qualnames & _SPLITTING_FUNCTIONS:
                return again(call_arg(node, 0, "input"))
            if method in _SPLITTING_METHODS and not qualnames:
                return again(func.value)
            if qualnames & _LIKE_FACTORIES:
                if dtype_arg is not None:
                    return self.dtype_value(dtype_arg, scope)
                return again(call_arg(node, 0, "input"))
            if qualnames & _SOFTMAX_FUNCTIONS or (method in _SOFTMAX_METHODS and not qualnames):
                # without `dtype=` unknown: fp16 in may be fp32 out (autocast), and not following the
                # input keeps `scores = softmax(scores + m)` chains linear
                return self.dtype_value(dtype_arg, scope) if dtype_arg is not None else None
            if qualnames & _DTYPE_KEEPING_FUNCTIONS:
                if dtype_arg is not None:
                    return self.dtype_value(dtype_arg, scope)
                return again(call_arg(node, 0, "input"))
            if method in _DTYPE_KEEPING_METHODS and not qualnames:
                if dtype_arg is not None:  # `new_zeros(n, dtype=...)`, `x.sum(dtype=torch.float32)`
                    return self.dtype_value(dtype_arg, scope)
                return again(func.value)
            return self._returned_dtype(node)
        if isinstance(node, cst.Attribute) and scope is not None:
            return module_state_dtype(self, node, scope)
        if isinstance(node, cst.Subscript):
            return again(node.value)
        if isinstance(node, cst.BinaryOperation) and isinstance(node.operator, _ARITHMETIC):
            return _promoted(node, again)
        if isinstance(node, cst.Name) and scope is not None and before is not None:
            if self._name_dtypes is None:  # linear in the function (model/dtype_flow.py)
                from .dtype_flow import NameDtypes

                self._name_dtypes = NameDtypes(self)
            found = self._name_dtypes.lookup(node.value, scope, before, statement, _depth, path)
            return found if found is not None else cast_inputs_dtype(self, node.value, scope, before)
        return None

    def _returned_dtype(self, node: cst.Call) -> Optional[str]:
        """What a function of this file (`ctx.callee`: `self._shift(x)`, a helper) returns: the
        dtype all its `return` values agree on, read in its own body with its parameters
        unknown (so only what its body makes decides: `torch.cat([torch.zeros(...), x])` is at
        least fp32 whatever `x` is). None for a generator, a bare `return`, or a disagreement."""
        info = self.call_info(node)
        callee = self.callee(info) if info is not None else None
        if callee is None or callee.generator or not callee.returns:
            return None
        memo = self._returned_dtypes
        if id(callee) not in memo:
            memo[id(callee)] = None  # a function that returns its own call: unknown
            # read with a fresh depth budget: the answer is the function's own, kept for every asker
            dtypes = {self.known_dtype(value, callee, before) for value, before in callee.returns}
            memo[id(callee)] = dtypes.pop() if len(dtypes) == 1 else None
        return memo[id(callee)]

    def unpacks_alike(self, value: cst.BaseExpression) -> bool:
        """`a, b = value` gives every target the same dtype, the one `known_dtype(value)` tells:
        `torch.meshgrid(y, x)`, `torch.broadcast_tensors(...)`, `x.chunk(2)`, `x.unbind(0)`."""
        if not isinstance(value, cst.Call):
            return False
        qualnames = self.qualnames(value.func)
        if qualnames:
            return bool(qualnames & (_ALIGNING_FUNCTIONS | _SPLITTING_FUNCTIONS))
        return isinstance(value.func, cst.Attribute) and value.func.attr.value in _SPLITTING_METHODS

    def dtype_kind(self, node: Optional[cst.CSTNode]) -> Optional[str]:
        """`dtype_of`, plus 'other' for torch dtypes that are not fp16/bf16/fp32 (`torch.long`)."""
        if node is None:
            return None
        d = self.dtype_of(node)
        if d is not None:
            return d
        if any(q.startswith("torch.") and q.split(".", 1)[1] in _OTHER_DTYPES for q in self.qualnames(node)):
            return "other"
        return None

    def dtype_value(self, node: Optional[cst.CSTNode], scope: Optional[Scope]) -> Optional[str]:
        """`dtype_kind`, also of a local name the function binds only to one dtype constant
        (`dtype = torch.bfloat16` then `torch.randn(n, dtype=dtype)`): no parameter, every
        assignment in `scope` the same dtype, no other binding (a loop, `with ... as`, `global`)."""
        d = self.dtype_kind(node)
        if d is not None or not isinstance(node, cst.Name) or scope is None or scope.is_module:
            return d
        key = (id(scope), node.value)
        if key not in self._dtype_names:
            self._dtype_names[key] = self._bound_dtype(node.value, scope)
        return self._dtype_names[key]

    def _bound_dtype(self, name: str, scope: Scope) -> Optional[str]:
        if name in scope.params:
            return None
        found = [a for a in self.assignments_to(name, scope) if a.scope is scope]
        if not found or any(a.unpacked or not isinstance(a.node, cst.Assign) or len(a.node.targets) != 1 for a in found):
            return None
        kinds = {self.dtype_kind(a.value) for a in found}
        if len(kinds) != 1 or None in kinds:
            return None
        bindings = sum(1 for n in subnodes(scope.node) if _binds(n, name))
        return kinds.pop() if bindings == len(found) else None

    # ------------------------------------------------------------------ queries

    def calls_to(self, *qualnames: str) -> List[CallInfo]:
        out: List[CallInfo] = []
        seen = set()
        for q in qualnames:
            for c in self._calls_by_qualname.get(q, ()):
                if id(c) not in seen:
                    seen.add(id(c))
                    out.append(c)
        out.sort(key=lambda c: c.order)
        return out

    def method_calls(self, *methods: str) -> List[CallInfo]:
        out: List[CallInfo] = []
        for m in methods:
            out.extend(self._calls_by_method.get(m, ()))
        out.sort(key=lambda c: c.order)
        return out

    def call_info(self, node: cst.Call) -> Optional[CallInfo]:
        return self._call_info.get(node)

    def assignments_to(self, target: str, scope: Optional[Scope] = None) -> List[Assignment]:
        found = self._assignments_by_target.get(target, [])
        if scope is None:
            return list(found)
        return [a for a in found if a.scope is scope or target.startswith("self.")]

    def assigned_before(self, name: str, call: CallInfo) -> List[Assignment]:
        """The plain assignments to the local `name` in `call`'s scope that come before `call`,
        in order (tuple unpacking left out): what `torch.save(ckpt, ...)` writes is the value
        of the last one."""
        return [
            a for a in self.assignments_to(name, call.scope) if a.scope is call.scope and a.order < call.order and not a.unpacked
        ]

    def scope_named(self, name: str, cls: Optional[cst.ClassDef] = None) -> Optional[Scope]:
        for s in self.scopes:
            if s.name == name and (cls is None or s.cls is cls):
                return s
        return None

    def callee(self, call: CallInfo) -> Optional[Scope]:
        """The function defined in this file that `call` runs, if it can be told.

        `self.m(...)` is the method `m` of the caller's class (or of another class
        in the file when the caller's class has none: a base class); `f(...)` is a
        function `f` nested in the caller, else a module-level one.
        """
        if self._scopes_by_name is None:
            self._scopes_by_name = {}
            for s in self.scopes:
                self._scopes_by_name.setdefault(s.name, []).append(s)
        if call.receiver_dotted == "self" and call.method:
            own = call.scope.cls
            methods = [s for s in self._scopes_by_name.get(call.method, ()) if s.cls is not None]
            for s in methods:
                if s.cls is own:
                    return s
            return methods[0] if len(methods) == 1 else None
        if call.method is None and isinstance(call.node.func, cst.Name):
            name = call.node.func.value
            functions = [s for s in self._scopes_by_name.get(name, ()) if s.cls is None and not s.is_module]
            scope: Optional[Scope] = call.scope
            while scope is not None:
                for s in functions:
                    if s.parent is scope:
                        return s
                scope = scope.parent
        return None

    def reachable_events(self, scope: Scope, depth: int = 3) -> List[Event]:
        """`scope`'s events followed by those of the functions it calls in this
        file (through `call` events, `depth` levels deep, each function once)."""
        out: List[Event] = []
        seen = {id(scope)}
        frontier = [scope]
        for _ in range(depth + 1):
            following: List[Scope] = []
            for s in frontier:
                for e in s.events:
                    out.append(e)
                    if e.kind == "call":
                        target = self.callee(e.call)
                        if target is not None and id(target) not in seen:
                            seen.add(id(target))
                            following.append(target)
            frontier = following
        return out

    def callers(self, scope: Scope) -> List[CallInfo]:
        """The calls in this file that run `scope` (as resolved by `callee`)."""
        if self._callers is None:
            self._callers = {}
            for s in self.scopes:
                for e in s.events:
                    if e.kind == "call":
                        target = self.callee(e.call)
                        if target is not None:
                            self._callers.setdefault(id(target), []).append(e.call)
        return list(self._callers.get(id(scope), ()))

    def scaler(self, key: Optional[str]) -> Optional[ScalerInfo]:
        return self.scalers.get(key) if key else None

    def is_optimizer(self, key: Optional[str]) -> bool:
        if not key:
            return False
        if key in self.optimizers:
            return True
        last = key.rsplit(".", 1)[-1].lower()
        if "sched" in last or "scaler" in last:
            return False
        return any(last == n or last.endswith(n) or last.startswith(n) for n in _OPTIMIZER_NAMES)

    def is_version_gated(self, path: Path) -> bool:
        """Inside an `except ImportError`, or an if/else on hasattr/version checks."""
        for frame in path:
            if frame.kind == "except":
                text = self.code_for(frame.test) if frame.test is not None else "ImportError"
                if any(e in text for e in _IMPORT_ERRORS):
                    return True
            elif frame.kind in ("if", "else") and frame.test is not None:
                text = self.code_for(frame.test)
                if is_version_test(text):
                    return True
        return False

    def project_uses_fp16(self) -> bool:
        return self.facts.fp16 or self.facts.dtype_unknown

    def references(self) -> List["Reference"]:
        """Every use of an imported name (`Name`/`Attribute` chain resolving
        through the imports), outermost chain only, with its branch path and
        how it is used: called, a decorator, or a bare reference. Computed on
        first use (one extra traversal), then cached."""
        if self._references is None:
            collector = _ReferenceCollector(self)
            walk(self.module, collector)  # the same hooks as `module.visit`, nothing rebuilt
            self._references = collector.references
            self._rebound = collector.bound
        return self._references

    def is_rebound(self, name: str) -> bool:
        """True when `name` is also bound by something other than an import
        (assignment, def, class, parameter, for/with target) anywhere in the
        file, so what it refers to at a given line is not known statically."""
        self.references()
        return name in self._rebound

    # ------------------------------------------------------------------ source

    def code_for(self, node: cst.CSTNode) -> str:
        from .fastgen import code

        return code(self.module, node)

    def position(self, node: cst.CSTNode) -> Tuple[Location, Location]:
        if self._positions is None:  # per top-level statement: linear in what is reported on
            from .positions import Positions

            self._positions = Positions(self.module)
        r = self._positions[node]
        return Location(r.start.line, r.start.column + 1), Location(r.end.line, r.end.column + 1)

    def parent(self, node: cst.CSTNode) -> Optional[cst.CSTNode]:
        if self._parents is None:
            self._parents = parent_map(self.module)
        return self._parents.get(node)

    def diagnostic(
        self,
        rule: "object",
        node: cst.CSTNode,
        message: Optional[str] = None,
        *,
        fix: Optional[Fix] = None,
        data: Optional[dict] = None,
        condition: Optional[str] = None,
        severity: Optional[Severity] = None,
        related: Sequence[Related] = (),
        help: Optional[str] = None,
    ) -> Diagnostic:
        """A diagnostic of `rule` spanning `node`; `related`: its other sites (`ctx.related(...)`);
        `help` says what to write instead."""
        start, end = self.position(node)
        if end.row > start.row:
            from ..core.text import first_row_span, split_lines

            lines = split_lines(self.source)  # (a multi-line finding: rare, so not kept)
            end = first_row_span(lines[start.row - 1] if start.row <= len(lines) else "", start, end)
        return Diagnostic(
            code=rule.code,
            name=rule.name,
            message=message or rule.message,
            severity=severity or rule.severity,
            filename=self.path,
            location=start,
            end_location=end,
            fix=fix,
            noqa_row=start.row,
            url=rule.url(),
            condition=condition,
            data=dict(data or {}),
            related=tuple(related),
            help=help,
        )

    def related(self, node: cst.CSTNode, message: str) -> Related:
        """Another site of a finding in this file, with a short note ("also saved")."""
        start, end = self.position(node)
        return Related(start, end, message)


def _file_facts(ctx: ModuleContext) -> FileFacts:
    active = [r for r in ctx.regions if r.enabled is not False]
    dtypes = {r.dtype for r in active}
    dtypes |= {c.dtype for c in ctx.low_precision_casts}
    dtypes |= {d for d, _ in ctx.dtype_refs}
    # constructing an enabled GradScaler only makes sense for fp16
    scaler = any(s.constructors and s.enabled is not False for s in ctx.scalers.values())
    return FileFacts(
        fp16="fp16" in dtypes or scaler,
        bf16="bf16" in dtypes,
        dtype_unknown=None in dtypes,
        autocast=_enters_autocast([r for r in active if not replays_autocast(ctx, r)]),
        autocast_aware=_anticipates_autocast(ctx),
    )


def _anticipates_autocast(ctx: ModuleContext) -> bool:
    """A region of any enabled state but fp32, custom_fwd/custom_bwd or an autocast-state query
    (imported, called or a decorator), or a GradScaler constructed."""
    if any(r.dtype != "fp32" for r in ctx.regions) or any(s.constructors for s in ctx.scalers.values()):
        return True
    names = torchapi.CUSTOM_FWD_BWD | _AUTOCAST_STATE
    if any(call.qualnames & names for call in ctx.calls):
        return True
    return any(ctx.imports.bound_name(q) is not None for q in sorted(names))


def _enters_autocast(active: List[AutocastRegion]) -> bool:
    """Some region may run ops in low precision: not `enabled=False` (a defensive region that
    keeps a caller's autocast out, as `@autocast("cuda", enabled=False)` on a rotary helper) and
    not `dtype=torch.float32` (runs the lower-precision list in fp32)."""
    return any(r.dtype != "fp32" for r in active)


#: functions that query the autocast state
_AUTOCAST_STATE = frozenset(
    {"torch.is_autocast_enabled", "torch.get_autocast_dtype", "torch.get_autocast_gpu_dtype", "torch.get_autocast_cpu_dtype",
     "torch.is_autocast_cpu_enabled"}
)
_ARITHMETIC = (cst.Add, cst.Subtract, cst.Multiply, cst.Divide)
_FLOATS = ("fp16", "bf16", "fp32")
_HELD = torchapi.MODULE_FP32
_KNOWN_FLOATS = _FLOATS + (_HELD,)
#: what a float tensor operand may be: a dtype, fp32 held by a module, or unknown
_FLOATING = _KNOWN_FLOATS + (None,)


def _promoted(node: cst.BinaryOperation, dtype_of) -> Optional[str]:
    """The dtype of `left <op> right` by type promotion, or None when it depends on what is unseen."""
    sides = []
    for side in (node.left, node.right):
        inner = side.expression if isinstance(side, cst.UnaryOperation) else side
        sides.append("number" if isinstance(inner, (cst.Integer, cst.Float)) else dtype_of(side))
    return _promote(*sides)


def _promote(left: Optional[str], right: Optional[str]) -> Optional[str]:
    """Type promotion of two operands ("number": a Python number), or None when it depends on
    what is unseen. fp32 lifts fp16/bf16 and unknown floats (a float64 partner would give
    float64, still not fp16); a tensor a module holds in fp32 (`torchapi.MODULE_FP32`) lifts
    them too unless the module is cast, so the result is fp32 on that same condition."""
    sides = (left, right)
    if "number" in sides:
        other = right if left == "number" else left
        return other if other in _KNOWN_FLOATS else None  # a Python number keeps a float tensor's dtype
    if left == right and left in _KNOWN_FLOATS:
        return left
    if all(s in _FLOATING for s in sides):
        if "fp32" in sides:
            return "fp32"
        if _HELD in sides:
            return _HELD
    return None


def _promote_all(dtypes: Sequence[Optional[str]]) -> Optional[str]:
    """Type promotion over several tensors (`torch.cat([a, b])`), as `_promote` pairwise."""
    if not dtypes:
        return None
    out = dtypes[0]
    for d in dtypes[1:]:
        out = _promote(out, d)
    return out


def _binds(node: cst.CSTNode, name: str) -> bool:
    """`node` binds (or declares) `name`: an assignment's target, a loop's, `with ... as`,
    `except ... as`, `:=`, an import, `global`/`nonlocal`, a nested `def`/`class`."""
    def named(target: Optional[cst.CSTNode]) -> bool:
        return target is not None and any(isinstance(n, cst.Name) and n.value == name for n in subnodes(target))

    if isinstance(node, cst.AssignTarget) or isinstance(node, (cst.AnnAssign, cst.AugAssign)):
        return named(node.target)
    if isinstance(node, (cst.For, cst.CompFor)):
        return named(node.target)
    if isinstance(node, cst.AsName):
        return named(node.name)
    if isinstance(node, cst.NamedExpr):
        return named(node.target)
    if isinstance(node, cst.ExceptHandler) and node.name is not None:
        return named(node.name)
    if isinstance(node, (cst.Global, cst.Nonlocal)):
        return any(n.name.value == name for n in node.names)
    if isinstance(node, cst.ImportAlias):
        return node.asname is None and node.evaluated_name.split(".")[0] == name
    if isinstance(node, (cst.FunctionDef, cst.ClassDef)):
        return node.name.value == name
    return False
