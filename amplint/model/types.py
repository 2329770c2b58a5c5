"""The AMP model's data: control-flow frames, scopes, calls, assignments, autocast
regions, scalers, optimizers, casts, training-step events and references.

Plain dataclasses filled in by the collector (`collector.py`) and the derived
passes (`scalers.py`, `dtypes.py`, `events.py`); rules read them."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import FrozenSet, Iterable, List, Optional, Tuple, Union

import libcst as cst

from .literals import call_arg


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
           autocast disables itself, so nothing runs in low
           precision, but the region is still entered (CUDA's BCE ban applies).
    enabled: True | False | None (decided at run time, e.g. `enabled=args.amp`)
    qualname: the autocast the call constructs (`torch.autocast`), also where the call spells
           a local name holding it (`autocast = torch.cuda.amp.autocast if amp else suppress`)
    selector: where the context is picked from a dict literal at run time (`with {"bf16":
           autocast(dtype=torch.bfloat16), "fp16": autocast(dtype=torch.float16), "fp32":
           nullcontext()}[args.precision]:`), that lookup; `call` is its first autocast, and
           `selected` holds each dict element whose value is an autocast with its own region
    """

    node: cst.CSTNode  # the With or the decorated FunctionDef
    call: cst.Call
    device: Optional[str]
    dtype: Optional[str]
    enabled: Optional[bool]
    parent: Optional["AutocastRegion"]
    framework: bool = False  # accelerator.autocast(), fabric.autocast()
    qualname: Optional[str] = None
    selector: Optional[cst.Subscript] = None
    selected: Tuple[Tuple[cst.DictElement, "AutocastRegion"], ...] = ()

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
    #: each `return`'s value (None: a bare `return`) and the order a read of it is asked at
    returns: List[Tuple[Optional[cst.BaseExpression], int]] = field(default_factory=list)
    generator: bool = False  # the body yields: a call returns a generator

    @property
    def is_module(self) -> bool:
        return isinstance(self.node, cst.Module)

    @property
    def definition(self) -> Optional[str]:
        """The name of the module-level `def` or `class` this scope is in (None at module level;
        a method's class, innermost when classes nest)."""
        scope = self
        while scope.parent is not None and not scope.parent.is_module:
            scope = scope.parent
        if scope.is_module:
            return None
        return scope.cls.name.value if scope.cls is not None else scope.name


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
