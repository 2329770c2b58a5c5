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
(`amplint.positions`): most parsed files have no finding, and libcst's
whole-module PositionProvider pass costs as much as the traversal.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Dict, FrozenSet, Iterable, Iterator, List, Optional, Sequence, Set, Tuple, Union

import libcst as cst

from . import torchapi
from .config import Config
from .diagnostics import Diagnostic, Fix, Location, Severity
from .names import ImportTable, dotted_name
from .project import FileFacts
from .walk import own_hook, parent_map, walk

# --------------------------------------------------------------------------- data


@dataclass(frozen=True)
class Frame:
    """One level of control flow around a statement.

    kind: "if" (body of an if/elif), "else" (its orelse), "loop" (for/while
    body), "loop-else", "try", "except", "try-else", "finally".
    """

    kind: str
    node: cst.CSTNode
    test: Optional[cst.CSTNode] = None  # If.test, or the ExceptHandler type


Path = Tuple[Frame, ...]


@dataclass(eq=False)
class AutocastRegion:
    """A stretch of code that runs under an autocast context.

    device: "cuda" | "cpu" | ... | None (decided at run time)
    dtype: "fp16" | "bf16" | "fp32" | None (decided at run time); the device default
           when the call omits it. "fp32" (an explicit `dtype=torch.float32`):
           CUDA autocast then runs its lower-precision list in fp32 and CPU
           autocast disables itself [amp-facts §1.1], so nothing runs in low
           precision, but the region is still entered (CUDA's BCE ban applies).
    enabled: True | False | None (decided at run time, e.g. `enabled=args.amp`)
    """

    node: cst.CSTNode  # the With or the decorated FunctionDef
    call: cst.Call
    device: Optional[str]
    dtype: Optional[str]
    enabled: Optional[bool]
    parent: Optional["AutocastRegion"]
    framework: bool = False  # accelerator.autocast(), fabric.autocast()

    @property
    def low_precision(self) -> Optional[bool]:
        """Whether ops here may run in a low-precision dtype (None: unknown)."""
        return self.enabled

    def may_run_fp16(self) -> bool:
        return self.enabled is not False and self.dtype in ("fp16", None)


@dataclass(eq=False)
class Scope:
    """A function body, or the module's top level (node is the Module)."""

    node: Union[cst.FunctionDef, cst.Module]
    name: str
    cls: Optional[cst.ClassDef]
    parent: Optional["Scope"]
    params: Tuple[str, ...] = ()
    calls: List["CallInfo"] = field(default_factory=list)
    events: List["Event"] = field(default_factory=list)

    @property
    def is_module(self) -> bool:
        return isinstance(self.node, cst.Module)


@dataclass(eq=False)
class CallInfo:
    node: cst.Call
    order: int
    qualnames: FrozenSet[str]
    dotted: Optional[str]  # the callee spelled as a dotted name
    method: Optional[str]  # `x.y.m(...)` -> "m"
    receiver: Optional[cst.BaseExpression]  # `x.y.m(...)` -> `x.y`
    receiver_dotted: Optional[str]
    scope: Scope
    path: Path
    region: Optional[AutocastRegion]
    statement: cst.CSTNode

    @property
    def qualname(self) -> Optional[str]:
        if len(self.qualnames) == 1:
            return next(iter(self.qualnames))
        return None

    def calls_any(self, names: Iterable[str]) -> bool:
        return not self.qualnames.isdisjoint(names)

    def arg(self, position: Optional[int], keyword: Optional[str] = None) -> Optional[cst.BaseExpression]:
        """The argument passed by `keyword`, or positionally at `position`."""
        return call_arg(self.node, position, keyword)


@dataclass(eq=False)
class Assignment:
    target: str  # dotted text of the target (`self.scaler`, `model`)
    value: cst.BaseExpression
    node: cst.CSTNode  # the Assign / AnnAssign / AugAssign
    order: int
    scope: Scope
    path: Path
    region: Optional[AutocastRegion]
    unpacked: bool = False  # `a, b = value`: value is the whole right-hand side
    statement: Optional[cst.CSTNode] = None  # the statement line holding the assignment


@dataclass(eq=False)
class MatMulInfo:
    """An `a @ b` expression (autocast's `matmul`), placed like a call."""

    node: cst.BinaryOperation
    order: int
    scope: Scope
    path: Path
    region: Optional[AutocastRegion]
    statement: cst.CSTNode


@dataclass(eq=False)
class LiteralInfo:
    """A numeric literal outside what fp16 represents (|x| > 65504, or 0 < |x| < 3e-8)."""

    node: cst.BaseExpression  # the number, or the UnaryOperation `-number`
    value: float
    parents: Tuple[cst.CSTNode, ...]  # innermost first, up to the statement
    call: Optional[CallInfo]  # the call it is an argument of, if any
    keyword: Optional[str]
    position: Optional[int]  # positional index when passed positionally
    scope: Scope
    path: Path
    region: Optional[AutocastRegion]
    statement: cst.CSTNode
    #: the traversal order at the literal: calls/assignments before it have a smaller order
    order: int = 0


@dataclass(eq=False)
class ScalerInfo:
    key: str  # `scaler`, `self.scaler`
    enabled: Optional[bool]  # literal enabled=, None when decided at run time
    device: Optional[str]
    constructors: List[CallInfo] = field(default_factory=list)
    is_parameter: bool = False


@dataclass(eq=False)
class OptimizerInfo:
    key: str
    qualname: Optional[str] = None
    fused: Optional[bool] = False
    prepared: bool = False  # wrapped by accelerate/Lightning/DeepSpeed: handles scaling itself
    constructors: List[CallInfo] = field(default_factory=list)


@dataclass(eq=False)
class LowPrecisionCast:
    """`.half()`, `.to(torch.float16)`, `from_pretrained(torch_dtype=...)` and friends."""

    call: CallInfo
    dtype: str  # "fp16" | "bf16"
    subject: Optional[str]  # the name that holds the low-precision object afterwards
    assignment: Optional[Assignment]


@dataclass(frozen=True)
class Event:
    """One step of a training step, in source order within its scope.

    kind: scaled_backward | backward | framework_backward | unscale | clip |
          scaler_step | optimizer_step | update | zero_grad | save | call
    """

    kind: str
    call: CallInfo
    scaler: Optional[str] = None
    optimizer: Optional[str] = None
    target: Optional[str] = None  # for "call": the called function's name

    @property
    def path(self) -> Path:
        return self.call.path

    @property
    def order(self) -> int:
        return self.call.order


@dataclass(eq=False)
class Reference:
    """One use of an imported name (see `ModuleContext.references`).

    use: "call" (`node(...)`; `call` is the Call), "decorator" (a bare `@node`;
    a called decorator is a "call" with `decorator` set), or "bare".
    """

    node: cst.BaseExpression  # the Name / Attribute chain
    qualnames: FrozenSet[str]
    root: str  # the chain's first name (`torch` in `torch.cuda.amp.autocast`)
    use: str
    path: Path
    call: Optional[cst.Call] = None
    decorator: Optional[cst.Decorator] = None
    annotation: bool = False  # inside a type annotation (never evaluated at run time with PEP 563)


# --------------------------------------------------------------------------- helpers


def call_arg(call: cst.Call, position: Optional[int], keyword: Optional[str] = None) -> Optional[cst.BaseExpression]:
    index = 0
    for arg in call.args:
        if arg.keyword is not None:
            if keyword is not None and arg.keyword.value == keyword:
                return arg.value
            continue
        if arg.star:
            return None  # *args: positions after it are unknowable
        if position is not None and index == position:
            return arg.value
        index += 1
    return None


def literal_bool(node: Optional[cst.CSTNode]) -> Optional[bool]:
    if isinstance(node, cst.Name) and node.value in ("True", "False"):
        return node.value == "True"
    return None


def literal_string(node: Optional[cst.CSTNode]) -> Optional[str]:
    if isinstance(node, cst.SimpleString):
        value = node.evaluated_value
        return value if isinstance(value, str) else None
    return None


def literal_number(node: Optional[cst.CSTNode]) -> Optional[float]:
    """The value of `1e9`, `-1e9`, `+5`, `10_000`; None for anything else."""
    sign = 1.0
    while isinstance(node, cst.UnaryOperation) and isinstance(node.operator, (cst.Minus, cst.Plus)):
        if isinstance(node.operator, cst.Minus):
            sign = -sign
        node = node.expression
    if isinstance(node, (cst.Float, cst.Integer)):
        try:
            return sign * float(node.evaluated_value)
        except (ValueError, OverflowError):
            return None
    return None


def imported_names(ctx: "ModuleContext", node: cst.CSTNode) -> Dict[str, str]:
    """{local name: qualified name} for every imported name used in `node` that
    resolves unambiguously, so the verifier can bind a flagged snippet."""
    names = _ImportedNames(ctx.imports)
    node.visit(names)
    return names.found


class _ImportedNames(cst.CSTVisitor):
    """For `imported_names` (a module-level class: one defined per call would hold its
    closure, and so the file's tree, in a reference cycle)."""

    def __init__(self, imports: ImportTable) -> None:
        super().__init__()
        self.imports = imports
        self.found: Dict[str, str] = {}

    def visit_Name(self, name: cst.Name) -> None:
        if name.value not in self.found:
            q = self.imports.qualname(name)
            if q is not None:
                self.found[name.value] = q


def call_chain(expr: cst.CSTNode) -> Iterator[cst.Call]:
    """`a.b().c().d()` yields the calls d(), c(), b() (outermost first)."""
    while True:
        if isinstance(expr, cst.Call):
            yield expr
            expr = expr.func
        elif isinstance(expr, cst.Attribute):
            expr = expr.value
        else:
            return


_CAST_METHOD_DTYPES = {"half": "fp16", "bfloat16": "bf16", "float": "fp32", "double": "other", "long": "other", "int": "other", "bool": "other"}
_FLOAT_FACTORIES = frozenset(
    f"torch.{n}" for n in ("zeros", "ones", "empty", "rand", "randn", "eye", "linspace", "logspace")
)
_LIKE_FACTORIES = frozenset(
    f"torch.{n}" for n in ("zeros_like", "ones_like", "empty_like", "rand_like", "randn_like", "full_like")
)
_DTYPE_KEEPING_FUNCTIONS = frozenset(
    f"torch.{n}" for n in ("triu", "tril", "transpose", "unsqueeze", "squeeze", "reshape", "flatten", "clone", "masked_fill")
)
_DTYPE_KEEPING_METHODS = frozenset(
    (
        "view", "view_as", "reshape", "unsqueeze", "squeeze", "transpose", "permute", "t", "contiguous", "clone",
        "detach", "expand", "expand_as", "repeat", "triu", "tril", "flatten", "masked_fill", "masked_fill_",
        "fill_", "cuda", "cpu", "new_zeros", "new_ones", "new_empty", "new_full", "new_tensor", "abs", "neg",
    )
)
_OTHER_DTYPES = frozenset(
    (
        "float64", "double", "int64", "long", "int32", "int", "int16", "short", "int8", "uint8", "bool",
        "complex64", "complex128", "cfloat", "cdouble",
    )
)


def _is_device_expr(ctx: "ModuleContext", node: cst.BaseExpression) -> bool:
    """`"cuda"`, `device`, `self.device`, `x.device`, `torch.device(...)`: `.to(<this>)` keeps the dtype."""
    s = literal_string(node)
    if s is not None:
        return s.split(":")[0] in ("cuda", "cpu", "xpu", "mps", "meta", "hpu", "xla")
    if isinstance(node, cst.Call):
        return bool(ctx.qualnames(node.func) & {"torch.device"})
    name = dotted_name(node)
    return name is not None and name.rsplit(".", 1)[-1] in ("device", "dev", "rank", "local_rank")


#: tests that pick code by torch version or API presence (not `is_torch_tpu_available()`,
#: which chooses hardware, not an API generation)
_VERSION_TEST = re.compile(
    r"hasattr|getattr|version|is_torch_(?:greater|less|version)|(?:greater|less)_(?:or_)?(?:equal_)?than|TORCH_\w*\d"
)
_IMPORT_ERRORS = ("ImportError", "AttributeError", "ModuleNotFoundError")

_SCALER_PARAM_HINT = "scaler"
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
        for q in self.qualnames(node):
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
    ) -> Optional[str]:
        """The floating dtype an expression visibly has: 'fp16' | 'bf16' | 'fp32' |
        'other' (float64, integer, bool) | None (unknown).

        Follows casts (`.half()`, `.float()`, `.to(torch.float16)`), factories
        (`torch.zeros(n)` is the default fp32, `dtype=` wins, `*_like` inherit),
        dtype-preserving methods (`view`, `triu`, `unsqueeze`, `to(device)`, ...)
        and plain names assigned in `scope` before order `before` (every such
        assignment must agree; the one in `statement` itself is ignored). It
        assumes the default dtype is float32 and never guesses otherwise.
        """
        if node is None or _depth > 10:
            return None
        again = lambda n, b=before: self.known_dtype(n, scope, b, statement, _depth + 1)  # noqa: E731
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
                        d = self.dtype_kind(arg.value)
                        if d is not None:
                            return d
                positional = [a.value for a in node.args if a.keyword is None]
                if all(_is_device_expr(self, a) for a in positional):
                    return again(func.value)
                return None
            if qualnames & _FLOAT_FACTORIES:
                if dtype_arg is not None:
                    return self.dtype_kind(dtype_arg)
                return "fp32"
            if qualnames & _LIKE_FACTORIES:
                if dtype_arg is not None:
                    return self.dtype_kind(dtype_arg)
                return again(call_arg(node, 0, "input"))
            if qualnames & _DTYPE_KEEPING_FUNCTIONS:
                return again(call_arg(node, 0, "input"))
            if method in _DTYPE_KEEPING_METHODS and not qualnames:
                if method in ("new_zeros", "new_ones", "new_empty", "new_full", "new_tensor") and dtype_arg is not None:
                    return self.dtype_kind(dtype_arg)
                return again(func.value)
            return None
        if isinstance(node, cst.Subscript):
            return again(node.value)
        if isinstance(node, cst.Name) and scope is not None and before is not None:
            if self._name_dtypes is None:  # linear in the function (amplint/dtype_flow.py)
                from .dtype_flow import NameDtypes

                self._name_dtypes = NameDtypes(self)
            return self._name_dtypes.lookup(node.value, scope, before, statement, _depth)
        return None

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
                if _VERSION_TEST.search(text):
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
            self.module.visit(collector)
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
        return self.module.code_for_node(node)

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
    ) -> Diagnostic:
        """A diagnostic of `rule` spanning `node`."""
        start, end = self.position(node)
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
        )


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


_STATEMENT_TYPES = (cst.SimpleStatementLine, cst.BaseCompoundStatement)
#: per node type: (visit hook, leave hook, is a statement), looked up once per type
_HOOKS: Dict[type, Tuple[Optional[object], Optional[object], bool]] = {}


class _Collector(cst.CSTVisitor):
    def __init__(self, ctx: ModuleContext) -> None:
        super().__init__()
        self.ctx = ctx
        module_scope = Scope(node=ctx.module, name="<module>", cls=None, parent=None)
        ctx.scopes.append(module_scope)
        self.scope = module_scope
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
        if isinstance(expr, cst.IfExp):
            # `autocast(...) if use_amp else nullcontext()`
            for side in (expr.body, expr.orelse):
                if isinstance(side, cst.Call) and self._is_autocast_call(side):
                    expr, conditional = side, True
                    break
            else:
                return None
        if isinstance(expr, cst.Name):
            aliased = self._autocast_aliases.get((id(self.scope), expr.value))
            if aliased is None:
                return None
            expr = aliased
        if not isinstance(expr, cst.Call):
            return None
        region = _parse_autocast(self.ctx, expr, node, self.region)
        if region is not None and conditional:
            region.enabled = None if region.enabled is not False else False
        return region

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

    def visit_BinaryOperation(self, node: cst.BinaryOperation) -> None:
        if isinstance(node.operator, cst.MatrixMultiply):
            self.ctx.matmuls.append(
                MatMulInfo(node, self._next(), self.scope, tuple(self.path), self.region, self.statement)
            )

    def visit_Attribute(self, node: cst.Attribute) -> Optional[bool]:
        qualnames = self.ctx.imports.qualnames(node)
        for q in qualnames:
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
            value = abs(float(node.evaluated_value))
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


def _parse_autocast(
    ctx: ModuleContext, call: cst.Call, node: cst.CSTNode, parent: Optional[AutocastRegion]
) -> Optional[AutocastRegion]:
    """An AutocastRegion if `call` constructs an autocast context, else None."""
    qualnames = ctx.imports.qualnames(call.func)
    known = [q for q in qualnames if q in torchapi.AUTOCAST_CONTEXTS]
    if known:
        q = known[0]
        implied_device = torchapi.AUTOCAST_CONTEXTS[q]
        if implied_device is None:
            device_node = call_arg(call, 0, "device_type")
            device = literal_string(device_node)
            dtype_node = call_arg(call, 1, "dtype")
            enabled_node = call_arg(call, 2, "enabled")
        else:
            device = implied_device
            enabled_node = call_arg(call, 0, "enabled")
            dtype_node = call_arg(call, 1, "dtype")
        if dtype_node is None:
            dtype = torchapi.DEVICE_DEFAULT_DTYPE.get(device) if device else None
        else:
            d = ctx.dtype_of(dtype_node)
            dtype = d if d in ("fp16", "bf16", "fp32") else None
        if enabled_node is None:
            enabled: Optional[bool] = True
        else:
            enabled = literal_bool(enabled_node)
        return AutocastRegion(node=node, call=call, device=device, dtype=dtype, enabled=enabled, parent=parent)
    # accelerate / Lightning Fabric: `accelerator.autocast()`; dtype comes from their config
    func = call.func
    if (
        isinstance(func, cst.Attribute)
        and func.attr.value == "autocast"
        and not qualnames
        and dotted_name(func.value) is not None
        and not ctx.imports.is_imported(dotted_name(func.value).split(".")[0])
    ):
        return AutocastRegion(node=node, call=call, device=None, dtype=None, enabled=None, parent=parent, framework=True)
    return None


# --------------------------------------------------------------------------- derived facts


def _enabled_arg(call: CallInfo, qualname: str) -> Optional[cst.BaseExpression]:
    # torch.amp.GradScaler(device, init_scale, growth_factor, backoff_factor, growth_interval, enabled)
    # torch.cuda.amp.GradScaler(init_scale, growth_factor, backoff_factor, growth_interval, enabled)
    position = 5 if qualname.startswith("torch.amp") else 4
    return call.arg(position, "enabled")


def _scaler_constructor(ctx: ModuleContext, value: cst.BaseExpression) -> Tuple[Optional[CallInfo], bool]:
    """The GradScaler(...) call in `value` and whether it is conditional (`X if c else None`)."""
    conditional = False
    candidates: List[cst.BaseExpression] = [value]
    if isinstance(value, cst.IfExp):
        candidates = [value.body, value.orelse]
        conditional = True
    elif isinstance(value, cst.BooleanOperation):
        candidates = [value.left, value.right]
        conditional = True
    for c in candidates:
        if isinstance(c, cst.Call):
            info = ctx.call_info(c)
            if info is not None and _is_grad_scaler(info):
                return info, conditional
    return None, False


def _is_grad_scaler(call: CallInfo) -> bool:
    return any(
        q in torchapi.GRAD_SCALERS or (q.startswith("torch.") and q.endswith("GradScaler")) for q in call.qualnames
    )


#: public: whether a call constructs a torch GradScaler (any import spelling)
is_grad_scaler_call = _is_grad_scaler


def _find_scalers(ctx: ModuleContext) -> None:
    def add(key: str, enabled: Optional[bool], device: Optional[str] = None, ctor: Optional[CallInfo] = None, param: bool = False) -> None:
        info = ctx.scalers.get(key)
        if info is None:
            ctx.scalers[key] = ScalerInfo(key=key, enabled=enabled, device=device, is_parameter=param)
            info = ctx.scalers[key]
        elif info.enabled != enabled:
            info.enabled = None
        if ctor is not None:
            info.constructors.append(ctor)
        if param:
            info.is_parameter = True

    for a in ctx.assignments:
        if a.unpacked:
            continue
        ctor, conditional = _scaler_constructor(ctx, a.value)
        if ctor is None:
            continue
        q = next(iter(sorted(ctor.qualnames)))
        enabled_node = _enabled_arg(ctor, q)
        enabled = True if enabled_node is None else literal_bool(enabled_node)
        if conditional and enabled is True:
            enabled = None
        device = None
        if q.startswith("torch.cuda"):
            device = "cuda"
        elif q.startswith("torch.cpu"):
            device = "cpu"
        elif q.startswith("torch.amp"):
            device = literal_string(ctor.arg(0, "device")) or ("cuda" if ctor.arg(0, "device") is None else None)
        add(a.target, enabled, device, ctor)
    # receivers used the way only a GradScaler is used
    for call in ctx.method_calls("backward"):
        inner = call.receiver
        if isinstance(inner, cst.Call) and isinstance(inner.func, cst.Attribute) and inner.func.attr.value == "scale":
            key = dotted_name(inner.func.value)
            if key and key not in ctx.scalers and not ctx.imports.is_imported(key.split(".")[0]):
                add(key, None)
    for call in ctx.method_calls("unscale_"):
        key = call.receiver_dotted
        if key and key not in ctx.scalers and not ctx.imports.is_imported(key.split(".")[0]):
            add(key, None)
    for scope in ctx.scopes:
        for p in scope.params:
            if _SCALER_PARAM_HINT in p.lower() and p not in ctx.scalers:
                add(p, None, param=True)
    # `self.scaler = scaler` (a parameter) inherits "unknown"
    for a in ctx.assignments:
        src = dotted_name(a.value)
        if src and src in ctx.scalers and a.target not in ctx.scalers:
            add(a.target, ctx.scalers[src].enabled)


def _find_optimizers(ctx: ModuleContext) -> None:
    for a in ctx.assignments:
        value = a.value
        if isinstance(value, cst.Call):
            info = ctx.call_info(value)
            if info is None:
                continue
            q = info.qualname
            if q and torchapi.is_optimizer_class(q) and not a.unpacked:
                fused_arg = info.arg(None, "fused")
                opt = ctx.optimizers.setdefault(a.target, OptimizerInfo(key=a.target))
                opt.qualname = q
                # absent: not fused; a literal: that; anything else: decided at run time
                opt.fused = False if fused_arg is None else literal_bool(fused_arg)
                opt.constructors.append(info)
            elif info.method == "prepare" or info.method in ("setup", "initialize", "setup_optimizers"):
                # accelerate `prepare`, Fabric `setup`, DeepSpeed `initialize`: the framework owns scaling
                if ctx.is_optimizer(a.target) or (a.unpacked and "optim" in a.target.lower()):
                    ctx.optimizers.setdefault(a.target, OptimizerInfo(key=a.target)).prepared = True
    for call in ctx.method_calls("step", "unscale_"):
        if call.receiver_dotted in ctx.scalers:
            opt = dotted_name(call.arg(0) or cst.Name("_")) if call.arg(0) is not None else None
            if opt and opt not in ctx.optimizers:
                ctx.optimizers[opt] = OptimizerInfo(key=opt, fused=None)


_CAST_METHODS = {"half": "fp16", "bfloat16": "bf16"}


def _cast_dtype(ctx: ModuleContext, call: CallInfo) -> Optional[str]:
    """The low-precision dtype a `.half()` / `.to(...)` / `from_pretrained(...)` call produces."""
    if call.method in _CAST_METHODS and not call.node.args:
        return _CAST_METHODS[call.method]
    if call.method in ("to", "type"):
        for arg in call.node.args:
            if arg.keyword is None or arg.keyword.value == "dtype":
                d = ctx.dtype_of(arg.value)
                if d in ("fp16", "bf16"):
                    return d
                if call.method == "type" and dotted_name(arg.value) and dotted_name(arg.value).endswith("HalfTensor"):
                    return "fp16"
    if call.method == "from_pretrained" or (call.dotted or "").endswith("from_pretrained"):
        d = ctx.dtype_of(call.arg(None, "torch_dtype")) or ctx.dtype_of(call.arg(None, "dtype"))
        if d in ("fp16", "bf16"):
            return d
    return None


def _find_low_precision_casts(ctx: ModuleContext) -> None:
    by_node: Dict[cst.Call, Assignment] = {}
    for a in ctx.assignments:
        if a.unpacked:
            continue
        for c in call_chain(a.value):
            by_node[c] = a
    for call in ctx.calls:
        dtype = _cast_dtype(ctx, call)
        if dtype is None:
            continue
        assignment = by_node.get(call.node)
        subject = assignment.target if assignment is not None else call.receiver_dotted
        ctx.low_precision_casts.append(LowPrecisionCast(call=call, dtype=dtype, subject=subject, assignment=assignment))


def _scaled_names(scope: Scope, ctx: ModuleContext) -> Dict[str, str]:
    """`scaled = scaler.scale(loss)` in this scope: name -> scaler key."""
    out = {}
    for a in ctx.assignments:
        if a.scope is scope and isinstance(a.value, cst.Call) and isinstance(a.value.func, cst.Attribute):
            if a.value.func.attr.value == "scale":
                key = dotted_name(a.value.func.value)
                if key in ctx.scalers:
                    out[a.target] = key
    return out


def _events(ctx: ModuleContext, scope: Scope) -> List[Event]:
    events: List[Event] = []
    scaled = None
    local_functions = ctx.__dict__.get("_local_function_names")
    if local_functions is None:  # once per module, not once per scope (quadratic on files with thousands of functions)
        local_functions = ctx._local_function_names = {s.name for s in ctx.scopes if not s.is_module}
    for call in scope.calls:
        m = call.method
        recv = call.receiver_dotted
        if m == "backward":
            inner = call.receiver
            if isinstance(inner, cst.Call) and isinstance(inner.func, cst.Attribute) and inner.func.attr.value == "scale":
                key = dotted_name(inner.func.value)
                if key in ctx.scalers:
                    events.append(Event("scaled_backward", call, scaler=key))
                    continue
            if scaled is None:
                scaled = _scaled_names(scope, ctx)
            if recv in scaled:
                events.append(Event("scaled_backward", call, scaler=scaled[recv]))
            elif call.node.args and call.node.args[0].keyword is None and recv and not ctx.imports.is_imported(recv.split(".")[0]):
                events.append(Event("framework_backward", call))
            else:
                events.append(Event("backward", call))
        elif m in ("manual_backward",):
            events.append(Event("framework_backward", call))
        elif call.calls_any(("torch.autograd.backward",)):
            events.append(Event("backward", call))
        elif call.calls_any(torchapi.CLIP_FUNCTIONS):
            events.append(Event("clip", call))
        elif m == "unscale_" and recv in ctx.scalers:
            events.append(Event("unscale", call, scaler=recv, optimizer=_arg_key(call)))
        elif m == "step" and recv in ctx.scalers:
            events.append(Event("scaler_step", call, scaler=recv, optimizer=_arg_key(call)))
        elif m == "update" and recv in ctx.scalers:
            events.append(Event("update", call, scaler=recv))
        elif m == "step" and ctx.is_optimizer(recv):
            events.append(Event("optimizer_step", call, optimizer=recv))
        elif m == "zero_grad":
            events.append(Event("zero_grad", call, optimizer=recv))
        elif call.calls_any(("torch.save",)):
            events.append(Event("save", call))
        elif recv == "self" and m:
            events.append(Event("call", call, target=m))
        elif call.dotted in local_functions:
            events.append(Event("call", call, target=call.dotted))
    return events


def _arg_key(call: CallInfo) -> Optional[str]:
    arg = call.arg(0, "optimizer")
    return dotted_name(arg) if arg is not None else None


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
        autocast=bool(ctx.regions),
    )


class _ReferenceCollector(cst.CSTVisitor):
    """Collects `Reference`s and the names bound other than by import.

    Branch frames mirror `_Collector`'s (if/else, try/except, loops) and are
    kept across function definitions, so a function defined under a version
    check counts as version-gated. Conditional expressions and the arguments of
    `getattr`/`hasattr` calls add an "if" frame whose test is that expression.
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
        self.bound.add(node.name.value)

    def visit_ClassDef(self, node: cst.ClassDef) -> None:
        self.skip.add(id(node.name))
        self.bound.add(node.name.value)

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
            self.bound.add(target.value)
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


def enclosing(path: Path, kind: str) -> Optional[Frame]:
    """The innermost frame of `kind` in `path`."""
    for frame in reversed(path):
        if frame.kind == kind:
            return frame
    return None


def path_contains(outer: Path, inner: Path) -> bool:
    """True when `inner` runs whenever `outer` runs (outer is a prefix of inner)."""
    return len(outer) <= len(inner) and tuple(inner[: len(outer)]) == tuple(outer)


def exclusive(a: Path, b: Path) -> bool:
    """True when code at `a` and code at `b` never run in the same pass
    (the body and the else of one `if`, or a try body and its handler), or
    sit on opposite sides of two `if`s that test the same condition
    (`if use_amp: ... else: ...` written twice, or `if c:` and `if not c:`)."""
    kinds_a = {id(f.node): f.kind for f in a}
    for f in b:
        other = kinds_a.get(id(f.node))
        if other is not None and other != f.kind:
            if {other, f.kind} == {"if", "else"} or {other, f.kind} == {"try-else", "except"}:
                return True
    for fa in a:
        if fa.kind not in ("if", "else") or fa.test is None:
            continue
        for fb in b:
            if fb.kind in ("if", "else") and fb.test is not None and fb.node is not fa.node:
                if _opposite_tests(fa, fb):
                    return True
    return False


def _negated(test: cst.BaseExpression) -> Optional[cst.BaseExpression]:
    if isinstance(test, cst.UnaryOperation) and isinstance(test.operator, cst.Not):
        return test.expression
    return None


def _opposite_tests(fa: Frame, fb: Frame) -> bool:
    """The two frames run under contradicting values of one condition
    (the condition is assumed unchanged between the two `if`s)."""
    ta, tb = fa.test, fb.test
    flip = False
    na, nb = _negated(ta), _negated(tb)
    if na is not None and nb is None:
        ta, flip = na, True
    elif nb is not None and na is None:
        tb, flip = nb, True
    elif na is not None and nb is not None:
        ta, tb = na, nb
    if not ta.deep_equals(tb):
        return False
    return (fa.kind != fb.kind) != flip


def precedes(a: Event, b: Event) -> bool:
    return a.order < b.order


def loops(path: Path) -> Sequence[Frame]:
    return [f for f in path if f.kind == "loop"]


# --------------------------------------------------------------------------- autocast ops, casts, regions


@dataclass(eq=False)
class AutocastOp:
    """A use of an op that autocast lists: a torch function, a Tensor method, a
    call of a module whose forward is that op (`self.fc(x)` with
    `self.fc = nn.Linear(...)`), or `a @ b`.

    op: the aten name (`linear`, `matmul`...). Whether it runs in the
    low-precision dtype depends on the device: `torchapi.runs_in_lower_precision`.
    inputs: the expressions whose tensors it consumes.
    """

    node: cst.CSTNode
    op: str
    inputs: Tuple[cst.BaseExpression, ...]
    scope: Scope
    path: Path
    region: Optional[AutocastRegion]
    order: int
    statement: cst.CSTNode


def autocast_ops(ctx: ModuleContext) -> List[AutocastOp]:
    """Every use of an autocast-listed op in the module, in source order (computed once)."""
    if ctx._autocast_ops is None:
        ops: List[AutocastOp] = []
        for call in ctx.calls:
            op = _call_op(ctx, call)
            if op is not None:
                ops.append(op)
        for mm in ctx.matmuls:
            ops.append(AutocastOp(mm.node, "matmul", (mm.node.left, mm.node.right), mm.scope, mm.path, mm.region, mm.order, mm.statement))
        ops.sort(key=lambda o: o.order)
        ctx._autocast_ops = ops
        ctx._autocast_op_by_node = {o.node: o for o in ops}
    return ctx._autocast_ops


def autocast_op_of(ctx: ModuleContext, node: cst.CSTNode) -> Optional[AutocastOp]:
    """The listed op `node` (a Call or `a @ b`) is, if any."""
    autocast_ops(ctx)
    return ctx._autocast_op_by_node.get(node)


def _call_op(ctx: ModuleContext, call: CallInfo) -> Optional[AutocastOp]:
    node = call.node
    if any(a.keyword is not None and a.keyword.value == "out" for a in node.args):
        return None  # `out=` calls are not autocast [amp-facts §1.1]
    args = tuple(a.value for a in node.args if not a.star)

    def make(op: str, inputs: Tuple[cst.BaseExpression, ...]) -> AutocastOp:
        return AutocastOp(node, op, inputs, call.scope, call.path, call.region, call.order, call.statement)

    for q in call.qualnames:
        op = torchapi.AUTOCAST_OP_FUNCTIONS.get(q)
        if op is not None:
            return make(op, args)
    if call.qualnames:
        return None
    if call.method in torchapi.AUTOCAST_OP_METHODS and call.receiver is not None:
        return make(torchapi.AUTOCAST_OP_METHODS[call.method], (call.receiver, *args))
    cls = module_class(ctx, node.func, call.scope)
    if cls is not None and cls in torchapi.AUTOCAST_OP_MODULES:
        positional = tuple(a.value for a in node.args if a.keyword is None and not a.star)
        return make(torchapi.AUTOCAST_OP_MODULES[cls], positional)
    return None


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
        # `self.fc` of this class (or a base class defined in this file), not of unrelated classes
        family = _class_family(ctx, scope)
        if not family:
            return None
        candidates = [a for a in ctx.assignments_to(dotted) if _enclosing_class_name(a.scope) in family]
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


def _enclosing_class_name(scope: Optional[Scope]) -> Optional[str]:
    while scope is not None:
        if scope.cls is not None:
            return scope.cls.name.value
        scope = scope.parent
    return None


def _class_family(ctx: ModuleContext, scope: Scope) -> Set[str]:
    """The name of the class `scope` is a method of (through nested functions) and of its base
    classes defined in this file, transitively; empty outside any class."""
    name = _enclosing_class_name(scope)
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


def fp32_cast(ctx: ModuleContext, node: cst.CSTNode) -> bool:
    """`x.float()`, `x.to(torch.float32)`, `x.to(device, torch.float)`, `x.type(torch.float32)`."""
    if not isinstance(node, cst.Call) or not isinstance(node.func, cst.Attribute):
        return False
    method = node.func.attr.value
    if method == "float":
        return not node.args
    if method in ("to", "type"):
        for arg in node.args:
            if (arg.keyword is None or arg.keyword.value == "dtype") and not isinstance(arg.value, cst.SimpleString):
                if ctx.dtype_of(arg.value) == "fp32":
                    return True
    return False


def strip_views(ctx: ModuleContext, expr: cst.BaseExpression) -> cst.BaseExpression:
    """The tensor expression under dtype-preserving views: `h.transpose(1, 2)[0]` -> `h`."""
    while True:
        if (
            isinstance(expr, cst.Call)
            and isinstance(expr.func, cst.Attribute)
            and expr.func.attr.value in torchapi.DTYPE_PRESERVING_METHODS
            and not any(ctx.dtype_of(a.value) for a in expr.args)  # `x.view(torch.float16)` reinterprets
        ):
            expr = expr.func.value
        elif isinstance(expr, cst.Subscript):
            expr = expr.value
        elif isinstance(expr, cst.Attribute) and expr.attr.value in ("T", "mT", "H", "mH"):
            expr = expr.value
        else:
            return expr


def active_region(region: Optional[AutocastRegion]) -> Optional[AutocastRegion]:
    """The region whose autocast is in force at code inside `region`: the
    innermost one that is not switched off by a nested `enabled=False` region
    of its device. None when autocast is (or may be) off there; a disabled
    region whose device is not known counts as switching everything off."""
    disabled = set()
    r = region
    while r is not None:
        if r.enabled is False:
            if r.device is None:
                return None
            disabled.add(r.device)
        elif r.device is None:
            return None if disabled else r
        elif r.device not in disabled:
            return r
        r = r.parent
    return None


def region_within(region: Optional[AutocastRegion], ancestor: AutocastRegion) -> bool:
    """Whether `region` is `ancestor` or nested (lexically) inside it."""
    r = region
    while r is not None:
        if r is ancestor:
            return True
        r = r.parent
    return False


def same_device(ctx: ModuleContext, a: AutocastRegion, b: AutocastRegion) -> bool:
    """Whether two regions are known to autocast the same device: both literal
    and equal, or both given by the same expression (`device_type=dev`)."""
    if a.framework or b.framework:
        return False
    if a.device is not None or b.device is not None:
        return a.device == b.device
    da, db = call_arg(a.call, 0, "device_type"), call_arg(b.call, 0, "device_type")
    return da is not None and db is not None and ctx.code_for(da) == ctx.code_for(db)


def assignment_before(ctx: ModuleContext, name: str, scope: Scope, statement: cst.CSTNode, order: int) -> Optional[Assignment]:
    """The last assignment to `name` in `scope` in an earlier statement than
    `statement` (source order; loops are not unrolled)."""
    found = None
    for a in ctx.assignments_to(name):
        if a.scope is scope and a.order < order and a.statement is not statement:
            if found is None or a.order > found.order:
                found = a
    return found
