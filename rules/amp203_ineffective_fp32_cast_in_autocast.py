"""AMP203 ineffective-fp32-cast-in-autocast."""
from __future__ import annotations

import re


import functools
from typing import TYPE_CHECKING, Any, Dict, Iterator, List, Optional, Set, Tuple

from amplint.model import Diagnostic, Invalid, Project, ProjectCall, Rule, Severity, Valid, Witness, torchapi

if TYPE_CHECKING:  # the per-file model: its functions import what they run (check_project needs no libcst)
    import libcst as cst

    from amplint.model import Assignment, AutocastOp, AutocastRegion, ModuleContext, Scope

_DTYPE_WORDS = {"fp16": "fp16", "bf16": "bf16", None: "low-precision"}


class IneffectiveFp32CastInAutocast(Rule):
    """
    ## What it does
    Flags `.float()` / `.to(torch.float32)` inside an enabled autocast region
    when the cast's result goes straight into an op that autocast runs in the
    low-precision dtype (`linear`, `matmul`/`@`, `mm`, `bmm`, `addmm`,
    `baddbmm`, convolutions, `scaled_dot_product_attention`, `einsum` on CUDA,
    ...; the lists differ per device) and the cast's input is known to be a
    floating tensor (the output of such an op or of an `nn.Linear`/`nn.Conv*`/
    norm/embedding module, a parameter, a low-precision cast).

    ## Why is this bad?
    Ops on autocast's lower-precision list cast every floating input to the
    autocast dtype whatever dtype it arrives in, so the manual upcast is undone
    before the op runs: in amplint's measurement `lin(h.float())` under bf16 autocast
    still returned bf16. The op the author wanted in fp32 (typically a
    numerically sensitive projection or attention score) silently runs in
    fp16/bf16, and the cast costs a round trip through memory. Only a nested
    `autocast(enabled=False)` makes the op run in fp32.

    ## Example
    ```python
    with torch.autocast("cuda", dtype=torch.bfloat16):
        h = self.fc1(x)
        logits = self.head(h.float())  # still bf16
    ```

    ## Use instead
    ```python
    with torch.autocast("cuda", dtype=torch.bfloat16):
        h = self.fc1(x)
        with torch.autocast("cuda", enabled=False):
            logits = self.head(h.float())  # fp32
    ```

    ## Fix safety
    No fix is offered: whether the op should really run in fp32 (and pay for
    it) or the cast should simply go is the author's call.

    ## Verification
    `amplint --verify` runs the op on a tiny input under the region's autocast
    device and dtype, with and without the cast, and reports the output dtype
    (the same low-precision dtype both times).

    ## Notes
    Silent when the cast feeds an fp32-list or unlisted op (`F.cross_entropy`,
    `softmax`, `pow(2).mean()`), when the cast name is also used elsewhere,
    after the region, inside `autocast(enabled=False)`, and when the cast's
    input may be an integer or boolean tensor (`mask.float()` into `bmm`
    converts a mask, it is not an upcast). Ops are taken from the region's
    device list: `einsum` is lower precision on CUDA but not listed on CPU.
    A module attribute (`self.head`) is known from the assignments in its own
    class and that class's bases defined in the file; when they disagree or
    none is visible, the op is treated as unknown and nothing is reported.
    Across files: a function with no autocast of its own (nor `custom_fwd`)
    whose fp32 copy is read only as an input of such ops, through views
    (`transpose`, `contiguous`, subscripts, `.T`), a scaling (`q /
    math.sqrt(d)`), the split of a copy into attention inputs (`q, k, v =
    qkv[0], qkv[1], qkv[2]`) or for its metadata (`.dtype`, `.shape`,
    `.size()`), is flagged where the project runs it under a low-precision
    autocast: a region in another file (or around a call of it) from which the
    project's calls lead to the function (a trainer's `model_forward` calling
    `self.fsdp_model(...)`, a dataclass field holding `FSDP(model)`, down to
    the attention's `forward`). The region must be enabled (or decided at run
    time: "when enabled"), not fp32, and no `autocast(enabled=False)` may
    shield a call on the way; the ops are taken from its device's list. The
    cast's receiver must be known floating there too: an op or an `nn.Linear`
    / `nn.Conv*` made it, it is a cast's result, or the function saves its
    dtype and casts back to it (`og_dtype = xq.dtype; ...;
    out.to(og_dtype)`). A model run only by programs that enter no autocast is
    silent, as is a cast inside a loop or whose name is rebound where the
    order of reads is not certain. The callers are found by the project model
    from the files holding an optimizer, a GradScaler or a framework's
    precision (its universe), so an inference-only script's autocast is not
    followed.

    ## References
    - amplint's evidence page: `amplint --explain AMP203` (docs/evidence.md#amp203)
    - https://pytorch.org/docs/stable/amp.html#autocast-op-reference
    """

    code = "AMP203"
    name = "ineffective-fp32-cast-in-autocast"
    severity = Severity.WARNING
    message = "fp32 cast undone by autocast"
    triggers = ("autocast",)  # a region in this file (every region is an autocast call)
    requires = (("float",),)
    #: an autocast region: a call of autocast (any spelling ends so) or an import alias of it
    gate_regex = re.compile(r"autocast\s*\(|autocast\s+as\s")
    #: findings depend only on the region's own definition, module-level statements and the class family
    gate_sites = "amplint.core.gates:autocast_region_lines"

    VALID = [
        Valid(
            """
import torch
import torch.nn.functional as F
lin = torch.nn.Linear(8, 8)
with torch.autocast("cuda"):
    h = lin(x)
    loss = F.cross_entropy(h.float(), y)
""",
            "the cast feeds an fp32-list op (a loss)",
        ),
        Valid(
            """
import torch
lin = torch.nn.Linear(8, 8)
with torch.autocast("cuda", dtype=torch.bfloat16):
    h = lin(x)
    probs = h.float().softmax(-1)
""",
            "the cast feeds an op that is not on the lower-precision list",
        ),
        Valid(
            """
import torch
lin = torch.nn.Linear(8, 8)
with torch.autocast("cuda", dtype=torch.bfloat16):
    h = lin(x)
out = lin(h.float())
""",
            "the cast is after the region",
        ),
        Valid(
            """
import torch
lin = torch.nn.Linear(8, 8)
with torch.autocast("cuda", dtype=torch.bfloat16):
    h = lin(x)
    with torch.autocast("cuda", enabled=False):
        out = lin(h.float())
""",
            "the documented way: a nested autocast(enabled=False)",
        ),
        Valid(
            """
import torch
with torch.autocast("cuda"):
    hidden = encoder(input_ids)
    pooled = torch.bmm(attention_mask.unsqueeze(1).float(), hidden)
""",
            "`mask.float()` may convert an integer mask: not known to be an upcast",
        ),
        Valid(
            """
import torch
from torch import nn
class RMSHead(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(64, 64)
        self.out = nn.Linear(64, 10)

    def forward(self, x):
        with torch.autocast("cuda", dtype=torch.bfloat16):
            h = self.fc(x)
            h = h.float()
            h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + 1e-6)
            return self.out(h)
""",
            "the fp32 copy is also used by the hand-written RMS norm, where the cast does count",
        ),
        Valid(
            """
import torch
lin = torch.nn.Linear(8, 8)
with torch.autocast("cpu", dtype=torch.bfloat16):
    h = lin(x)
    y = torch.einsum("ij,jk->ik", h.float(), w)
""",
            "einsum is not on CPU autocast's list",
        ),
    ]

    INVALID = [
        Invalid(
            """
import torch
lin = torch.nn.Linear(8, 8)
with torch.autocast("cpu", dtype=torch.bfloat16):
    h = lin(x)
    out = lin(h.float())
""",
            line=5,
            why="the cast is undone under bf16 autocast (measured, docs/evidence.md)",
        ),
        Invalid(
            """
import torch
from torch import nn

class Block(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.fc1 = nn.Linear(dim, 4 * dim)
        self.fc2 = nn.Linear(4 * dim, dim)

    def forward(self, x):
        with torch.autocast("cuda", dtype=torch.bfloat16):
            h = self.fc1(x)
            h = h.float()  # keep the down projection in fp32
            return self.fc2(h)
""",
            line=13,
        ),
        Invalid(
            """
import torch.nn as nn
from torch.cuda.amp import autocast

class Attention(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.q = nn.Linear(dim, dim)
        self.k = nn.Linear(dim, dim)

    def forward(self, x):
        with autocast():
            q, k = self.q(x), self.k(x)
            scores = q.float() @ k.float().transpose(-2, -1)
        return scores
""",
            count=2,
            line=13,
        ),
        Invalid(
            """
import torch
import torch.nn.functional as F
weight = torch.nn.Parameter(torch.randn(16, 16))
for x in loader:
    with torch.amp.autocast(device_type="cuda", enabled=use_amp):
        y = F.linear(x, weight.to(dtype=torch.float32))
""",
            line=6,
        ),
    ]

    def check(self, ctx: ModuleContext) -> Iterator[Diagnostic]:
        import libcst as cst

        from amplint.model import active_region, assignment_before, autocast_ops, fp32_cast, strip_views

        if not any(r.enabled is not False for r in ctx.regions):
            return
        lowp: List[Tuple[AutocastOp, AutocastRegion]] = []
        for op in autocast_ops(ctx):
            region = active_region(op.region)
            if region is not None and region.dtype != "fp32" and torchapi.runs_in_lower_precision(op.op, region.device):
                lowp.append((op, region))
        if not lowp:
            return
        fed: Dict[int, Tuple[AutocastOp, AutocastRegion]] = {}
        for op, region in lowp:
            for inp in op.inputs:
                fed[id(strip_views(ctx, inp))] = (op, region)
        reported: Set[int] = set()
        for op, region in lowp:
            for inp in op.inputs:
                base = strip_views(ctx, inp)
                cast: Optional[cst.Call] = None
                at = (op.statement, op.order)  # where the cast is evaluated
                if fp32_cast(ctx, base):
                    cast = base
                elif isinstance(base, cst.Name):
                    a = assignment_before(ctx, base.value, op.scope, op.statement, op.order)
                    if a is None or a.unpacked or active_region(a.region) is not region:
                        continue
                    value = strip_views(ctx, a.value)
                    if not fp32_cast(ctx, value) or not _all_uses_fed(ctx, a, fed, region):
                        continue
                    cast = value
                    at = (a.statement or a.node, a.order)
                if cast is None or id(cast) in reported:
                    continue
                receiver = cast.func.value  # type: ignore[union-attr]
                if not _is_floating(ctx, receiver, op.scope, *at):
                    continue
                reported.add(id(cast))
                yield self._diagnostic(ctx, cast, op, region)

    def check_project(self, project: Project) -> Iterator[Diagnostic]:
        """An fp32 cast in a function without autocast of its own whose copy only feeds ops
        autocast lowers (the summary's `up` sites, `model/project/upcasts.py`), where a
        low-precision autocast of the project runs the function (`autocast_witnesses`: a
        region, in another file or around a call of it, and the calls that lead there)."""
        project.reached()  # loads the modules autocast regions lead to
        for path, qual, info in list(project.functions()):
            sites = info.get("up")
            if not sites:
                continue
            witnesses = [w for w in project.autocast_witnesses((path, qual)) if w.region.dtype != "fp32"]
            for witness in witnesses:
                undone = [site for site in sites if _undone(project, path, qual, site, witness.region.device)]
                if undone:
                    yield self._project_diagnostic(project, ProjectCall(path, qual, undone[0]), undone, witness)
                    break

    def _project_diagnostic(self, project: Project, call: ProjectCall, sites: List[Dict[str, Any]], witness: Witness) -> Diagnostic:
        region = witness.region
        site = sites[0]
        op = site["ops"][0][1].rsplit(".", 1)[-1] if site["ops"] else site["mu"][0]
        dtype = _DTYPE_WORDS.get(region.dtype) if region.dtype in ("fp16", "bf16") else "low precision"
        when = " (when enabled)" if region.enabled is None else ""
        message = f"`{site['t']}` is undone: a caller's autocast{when} runs `{op}` in {dtype}"
        if len(message) >= 100:  # the callers and the region are the related site's
            method = re.search(r"\.(float|to|type)\(", site["t"])
            message = f"`.{method.group(1) if method else 'to'}(...)` is undone: a caller's autocast{when} runs `{op}` in {dtype}"
        related = [project.entered(region, witness.chain)]
        related.extend(project.related(call.path, other["r"], f"`{other['t']}` is undone too") for other in sites[1:])
        data = {"op": site["ops"][0][0] if site["ops"] else "linear", "device": region.device, "dtype": region.dtype,
                "region_line": region.row, "region_file": project.where(region.path, region.row)}
        return project.diagnostic(
            self, call, message, data=data, related=tuple(related),
            help=f"Run `{op}` in a nested `autocast(..., enabled=False)` to compute it in fp32",
        )

    def _diagnostic(self, ctx: ModuleContext, cast: cst.Call, op: AutocastOp, region: AutocastRegion) -> Diagnostic:
        dtype = _DTYPE_WORDS.get(region.dtype, "low-precision")
        row = ctx.position(region.call)[0].row
        text = ctx.code_for(cast)
        if len(text) > 40 or "\n" in text:
            text = "." + cast.func.attr.value + "(...)"  # type: ignore[union-attr]
        autocast = f"{region.device} autocast" if region.device else "autocast"
        when = " (when enabled)" if region.enabled is None else ""
        message = f"`{text}` is undone: {autocast}{when} runs `{op.op}` in {dtype} anyway"
        return ctx.diagnostic(
            self,
            cast,
            message,
            data={"op": op.op, "device": region.device, "dtype": region.dtype, "region_line": row},
            help=f"Run `{op.op}` in a nested `autocast(..., enabled=False)` to compute it in fp32",
        )


def _undone(project: Project, path: str, qual: str, site: Dict[str, Any], device: Optional[str]) -> bool:
    """A recorded upcast is undone under an autocast of `device`: every op its copy feeds is on
    that device's lower-precision list (`einsum` only on CUDA; both lists when the device is
    decided at run time), every callable it is passed to is a torch module autocast lowers, and
    its receiver is known floating (a cast, an op or module autocast lowers made it, or the
    function restores its dtype)."""
    if not all(torchapi.runs_in_lower_precision(aten, device) for aten, _ in site["ops"]):
        return False
    if not all(project.lowers(path, qual, spelled) for spelled in site["mu"]):
        return False
    src = site["src"]
    if src in ("lp", "fp32", "dt"):
        return True
    return isinstance(src, dict) and any(project.lowers(path, qual, spelled) for spelled in src.get("m", ()))


def _is_floating(ctx: ModuleContext, expr: cst.BaseExpression, scope: Scope, statement: cst.CSTNode, order: int, depth: int = 0) -> bool:
    """Whether `expr` is known to hold a floating tensor (so `.float()` on it is an upcast, not a conversion)."""
    import libcst as cst

    from amplint.model import assignment_before, autocast_op_of, module_class, strip_views

    expr = strip_views(ctx, expr)
    if isinstance(expr, (cst.Call, cst.BinaryOperation)):
        if autocast_op_of(ctx, expr) is not None:
            return True
        if isinstance(expr, cst.Call):
            if not ctx.qualnames(expr.func).isdisjoint(torchapi.FLOAT_FACTORIES):
                return True
            if any(c.call.node is expr for c in ctx.low_precision_casts):
                return True
            cls = module_class(ctx, expr.func, scope)
            return cls is not None and cls in torchapi.FLOAT_OUTPUT_MODULES
        return False
    if depth > 0 or not isinstance(expr, (cst.Name, cst.Attribute)):
        return False
    if isinstance(expr, cst.Attribute):
        cls = module_class(ctx, expr, scope)  # `self.weight = nn.Parameter(...)`
        return cls is not None and cls in torchapi.FLOAT_FACTORIES
    a = assignment_before(ctx, expr.value, scope, statement, order)
    if a is None:
        cls = module_class(ctx, expr, scope)  # a module-level parameter
        return cls is not None and cls in torchapi.FLOAT_FACTORIES
    value = _value_of(a)
    if value is None:
        return False
    return _is_floating(ctx, value, a.scope, a.statement or statement, a.order, depth + 1)


def _value_of(a: Assignment) -> Optional[cst.BaseExpression]:
    """The expression bound to `a.target`, also for `q, k = self.q(x), self.k(x)`."""
    import libcst as cst

    if not a.unpacked:
        return a.value
    if not isinstance(a.node, cst.Assign) or len(a.node.targets) != 1 or not isinstance(a.value, (cst.Tuple, cst.List)):
        return None
    target = a.node.targets[0].target
    if not isinstance(target, (cst.Tuple, cst.List)) or len(target.elements) != len(a.value.elements):
        return None
    for t, v in zip(target.elements, a.value.elements):
        if isinstance(t.value, cst.Name) and t.value.value == a.target and not isinstance(v, cst.StarredElement):
            return v.value
    return None


@functools.lru_cache(maxsize=None)
def _names_visitor() -> type:
    """The visitor class of `_all_uses_fed`, made once (libcst imported only when the per-file
    check runs; a class made per call would be cyclic garbage holding the file's tree)."""
    import libcst as cst

    class _Names(cst.CSTVisitor):
        """Loads and stores of one name in a scope's own body (not nested functions or classes)."""

        def __init__(self, name: str, root: cst.CSTNode) -> None:
            super().__init__()
            self.name = name
            self.root = root
            self.loads: List[cst.Name] = []
            self.stores: Set[int] = set()
            self.other_binding = False

        def visit_FunctionDef(self, node: cst.FunctionDef) -> bool:
            return node is self.root

        def visit_ClassDef(self, node: cst.ClassDef) -> bool:
            return False

        def visit_Lambda(self, node: cst.Lambda) -> bool:
            return False

        def visit_AssignTarget(self, node: cst.AssignTarget) -> None:
            for n in _target_names(node.target):
                self.stores.add(id(n))

        def visit_AnnAssign(self, node: cst.AnnAssign) -> None:
            for n in _target_names(node.target):
                self.stores.add(id(n))

        def visit_For(self, node: cst.For) -> None:
            if any(n.value == self.name for n in _target_names(node.target)):
                self.other_binding = True

        def visit_AugAssign(self, node: cst.AugAssign) -> None:
            if any(n.value == self.name for n in _target_names(node.target)):
                self.other_binding = True

        def visit_AsName(self, node: cst.AsName) -> None:
            if any(n.value == self.name for n in _target_names(node.name)):
                self.other_binding = True

        def visit_Name(self, node: cst.Name) -> None:
            if node.value == self.name and id(node) not in self.stores:
                self.loads.append(node)

    return _Names


def _target_names(target: cst.CSTNode) -> List[cst.Name]:
    import libcst as cst

    if isinstance(target, cst.Name):
        return [target]
    if isinstance(target, (cst.Tuple, cst.List)):
        out: List[cst.Name] = []
        for el in target.elements:
            out.extend(_target_names(el.value))
        return out
    if isinstance(target, cst.StarredElement):
        return _target_names(target.value)
    return []


def _all_uses_fed(ctx: ModuleContext, a: Assignment, fed: Dict[int, Tuple[AutocastOp, AutocastRegion]], region: AutocastRegion) -> bool:
    """Every read of `a.target` from `a` to its next assignment is an input of a
    lower-precision op under the same autocast region (so the fp32 copy serves nothing)."""
    root = a.scope.node
    names = _names_visitor()(a.target, root)
    root.visit(names)
    if names.other_binding:
        return False
    start = _end(ctx, a.statement or a.node)
    later = [
        _start(ctx, b.statement or b.node)
        for b in ctx.assignments_to(a.target)
        if b.scope is a.scope and b is not a and _start(ctx, b.statement or b.node) > start
    ]
    stop = min(later) if later else (10**9, 0)
    uses = [n for n in names.loads if start < _start(ctx, n) < stop]
    if not uses:
        return False
    for n in uses:
        hit = fed.get(id(n))
        if hit is None or hit[1] is not region:
            return False
    return True


def _start(ctx: ModuleContext, node: cst.CSTNode) -> Tuple[int, int]:
    loc = ctx.position(node)[0]
    return (loc.row, loc.column)


def _end(ctx: ModuleContext, node: cst.CSTNode) -> Tuple[int, int]:
    loc = ctx.position(node)[1]
    return (loc.row, loc.column)
