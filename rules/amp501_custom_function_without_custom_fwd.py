"""AMP501 custom-function-without-custom-fwd."""
from __future__ import annotations

import os
from typing import Dict, Iterator, List, Optional, Set, Tuple

import libcst as cst

from amplint.model import (
    AUTOCAST_AWARE_OP_NAMESPACES, AUTOCAST_OR_LIBRARY, AUTOCAST_REACHED, AUTOCAST_CONTEXTS, AUTOCAST_LOWER_PRECISION_FUNCS,
    AUTOCAST_LOWER_PRECISION_METHODS, AUTOGRAD_FUNCTION, CALLED_ELSEWHERE, CPP_EXTENSION_LOADERS, CUSTOM_FWD_BWD, KERNEL_FP32,
    KERNEL_NOT_MIXED, RUNNER_AUTOCAST, UNFORCED, CallInfo, forced_in_file, Diagnostic, Invalid, ModuleContext, Rule, Scope, Severity, Valid,
    imported_names, with_requirement, subnodes,
)

_CAST_METHODS = ("float", "half", "double", "bfloat16", "type_as")


class CustomFunctionWithoutCustomFwd(Rule):
    """
    ## What it does
    Flags a `torch.autograd.Function` subclass (any alias) whose `forward`
    runs autocastable ops (matmul, `@`, mm/bmm/addmm, linear, conv, einsum,
    SDPA: the lower-precision lists of §1.2/§1.3), or hands several of its
    float inputs to a compiled extension kernel, while neither `forward` nor
    `backward` is decorated with `custom_fwd` / `custom_bwd`, in a project
    that uses autocast.

    ## Why is this bad?
    The forward of an undecorated Function runs with autocast on, so its
    matmuls return fp16/bf16; the backward runs with autocast *off*, mixing
    the low-precision grad with fp32 saved tensors. In amplint's measurement exactly
    this failed in backward with `RuntimeError: expected m1 and m2 to have the
    same dtype, but got: c10::BFloat16 != float`; with
    `custom_fwd(device_type=...)`/`custom_bwd(device_type=...)` it worked. The
    other way round fails alike: when an fp32 bias added to the matmul makes
    the output (and so the grad) fp32, an input that arrived in low precision
    from an earlier autocast op, saved for backward, meets that fp32 grad. A
    kernel compiled for one dtype gets whatever flows in: fp16 activations
    next to fp32 weights. The AMP docs prescribe the decorators whenever a
    Function wraps an autocastable op or takes several floating inputs.

    ## Example
    ```python
    class LinearFn(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x, w):
            ctx.save_for_backward(x, w)
            return x @ w.t()
    ```

    ## Use instead
    ```python
    class LinearFn(torch.autograd.Function):
        @staticmethod
        @torch.amp.custom_fwd(device_type="cuda")
        def forward(ctx, x, w):
            ctx.save_for_backward(x, w)
            return x @ w.t()

        @staticmethod
        @torch.amp.custom_bwd(device_type="cuda")
        def backward(ctx, grad): ...
    ```
    For a kernel that needs one dtype, use
    `custom_fwd(device_type="cuda", cast_inputs=torch.float32)`.

    ## Fix safety
    No fix: the device and whether to pass `cast_inputs` are the author's call.

    ## Verification
    `amplint --verify` runs the flagged Function itself when its source can be
    bound (small inputs under CPU bf16 autocast, forward then backward), else
    the canonical reproduction, and reports the error or the dtypes.

    ## Notes
    Reported only when the project enters autocast somewhere (resolved across
    files: a region that is not `enabled=False` and not `dtype=torch.float32`;
    a defensive `@autocast("cuda", enabled=False)` helper shows no autocast)
    where a program loading the Function's file may enter it (below), or when
    the Function is library code: a public (no leading `_`),
    module-level class in a module of an importable package (a `.py` file
    next to an `__init__.py`, not a test, not a `__main__`/setup script, no
    `if __name__ == "__main__":` block, not under `tests/`, `examples/`,
    `scripts/`, `benchmarks/` or `docs/`) of a project that anticipates
    autocast somewhere: a region of any enabled state (not fp32), a
    `custom_fwd`/`custom_bwd`, a query of the autocast state, a GradScaler.
    Such a Function runs under its users' autocast whether or not the library
    opens a region itself (a kernel package); a package that does none of
    these was not written to run under autocast, its own or its users', and
    its own code decides what its Functions see (in fp32, or with parameters
    cast to bf16 as FSDP's mixed precision does). The library clause needs a
    package the project distributes (`amplint/model/embedded.py`): the project
    root is the package, or the package's parent folder holds its packaging
    (`setup.py`, `pyproject.toml`, `setup.cfg`, a wheel's `*.dist-info`; also
    `src/`); an application's own packages, with no such metadata, have no
    users but the application, so only its own autocast counts. Scripts and
    tests need autocast in the project.
    Where the project's autocast can meet the Function is read from its
    imports when conditions are resolved (`amplint/model/embedded.py`). A
    file may enter autocast when it constructs one that may run fp16/bf16
    (not `enabled=False`, not fp32), holds one for later (`ctx =
    torch.amp.autocast(...)`, `partial(torch.autocast, ...)`), enters a
    framework's (`accelerator.autocast()`) or sets a framework's mixed
    precision (`Trainer(precision="16-mixed")`, an `Accelerator` not set to
    `"no"`, `TrainingArguments(fp16=True)`; a value decided at run time
    counts; `amplint/model/project/entries.py`). An autocast decided at run
    time in the `backward` of a class (`torch.autocast(**ctx.autocast_kwargs)`,
    a checkpoint Function recomputing its forward) replays what the forward ran
    under: it enters nothing of its own, and alone it is no autocast of the
    project. The Function is reported when one module imports both its file and
    such a file (directly or through other modules, itself included, read with
    the project model's import resolution): the two may run in one program.
    This is asked of its project, then of the checkout (`.git`) holding it: a
    subproject's script imports the repository's packages (detectron2's
    `projects/TensorMask/train_net.py` its trainer). Where the imports cannot
    tell the program, it is reported too: a module importing its file is a
    package module nothing imports (loaded by a registry, a config's
    `_target_`, the package's users) or loads modules by a computed name
    (`import_module`, `instantiate`). With `precision = "fp16"` or `"bf16"`
    set, every program counts as entering autocast. So an archived training
    script with its own model and autocast (modded-nanogpt's `records/`) does
    not make the kernels that today's autocast-free script imports run under
    autocast. The project model's call graph cannot narrow this further: a
    chain from a region to a Function passes a registry, a config or a wrapper
    (`build_model(cfg)`, `DDP(model)`) it does not follow, so a chain it
    cannot resolve is no proof that none exists.
    A subproject of a checkout (a folder with its own packaging below the
    `.git`: one of microsoft/unilm's several copies of fairseq, each with its
    `setup.py`) is its own project: the library clause's "anticipates
    autocast" is asked of its files, not of the whole checkout, and where the
    imports cannot tell the program, only a program that runs some code of
    the subproject counts. Its files import their own copy of a package
    (`from fairseq.modules import ...` in `b/` is `b/fairseq/`, and a module
    that copy lacks is no other copy's), and its own modules by their names
    relative to it (`import train` in `b/tests/`). A script outside every
    copy imports the one nearest it (`kosmos-2/unilm/` its `kosmos-2/fairseq/`);
    copies equally near (`YOCO/` using an installed fairseq) leave it unknown,
    and none is picked. A bare name (`import trainer`) finds another
    subproject's module only where the script spells its folder as a path
    (`sys.path.append("../decoding/GAD")`). A `setup.py` in a
    subpackage of a package (fairseq's `modules/dynamicconv_layer/setup.py`,
    building its CUDA kernel in place) marks no project: its modules belong
    to the package above. So an autocast in a sibling subproject, which
    cannot import this copy, does not reach its Functions:
    ```text
    .git/
    edgelm/setup.py                      # INVALID: reported, edgelm anticipates autocast
    edgelm/fairseq/tasks/fairseq_task.py       # torch.cuda.amp.autocast() in train_step
    edgelm/fairseq/modules/dynamicconv_layer/dynamicconv_layer.py  # the Function
    decoding/GAD/setup.py                # VALID: silent, GAD's fp16 is model.half()
    decoding/GAD/fairseq/modules/dynamicconv_layer/dynamicconv_layer.py
    ```
    It is reported there too once GAD's own code autocasts, or once a
    program of the checkout that autocasts imports GAD's package.
    A package embedded in an application, below a folder that is not a
    package (a vendored library copy: `annotator/uniformer/mmcv/ops/`,
    `third_party/<lib>/<lib>/` without its own `setup.py`), is library code
    for nobody: its Functions' only callers are the application's code. Its
    Functions are reported only when a module outside the copy imports both
    theirs and a file, outside the copy, that may enter autocast (with the
    copy's own package name resolved); the copy's own autocast helpers do not
    count. A copy nothing outside imports never runs, whatever autocast the
    application (or the copy) enters. A copy nested in a top-level package
    of the application (`app/annotator/uniformer/mmcv/`, `__init__.py` all
    the way up) is embedded too when it shows it is a separate library: a
    LICENSE/COPYING or a `version.py` setting `__version__` in its folder,
    or its own modules importing it by its folder's name as a top-level
    name (`from mmcv.utils import ...`, `import_module("mmcv." + name)`)
    that is no top-level module of the project; those imports resolve in
    the copy. Not when the project's packaging distributes it (root
    metadata that builds a distribution with automatic discovery, or an
    explicit `packages=[...]` naming it): it is library code. Only
    when `backward` also does dtype-sensitive work (an
    autocastable op or a kernel call): that is where the mismatch surfaces.
    Silent when any method carries a `custom_fwd` / `custom_bwd` (or autocast)
    decorator, opens its own autocast region (`autocast(enabled=False)` in
    forward, autocast replayed in backward) or reads the autocast state
    (`torch.get_autocast_dtype`, `is_autocast_enabled`), when `backward`
    casts dtypes by hand (`w.to(grad.dtype)`, `.float()`) or hands the
    incoming grad's dtype to what builds its operands (`w = dequantize(q,
    scale, g.dtype)`, `g` a view of the grad; a saved input's `x.dtype` is
    not the grad's), for `out=` calls
    (not autocast, §1.1), for Functions without a
    `backward`, for ops fed straight from `torch.fft` (complex tensors are not
    autocast-eligible, §1.1), and for Functions that only move data:
    distributed gather/all-reduce/scatter, `.clone()`, indexing, `cat`.
    Silent too on a private Function (`_ROIAlignRotated`) that only this file
    applies (`_F.apply(...)`, or an alias `f = _F.apply` called here), when
    every call hands it an input its caller cast by hand (`x.float()` in the
    call, or `x = x.float()` before it, also under an `if x.dtype ==
    torch.float16:`, but not in a branch that cannot run with the call, such
    as the `if not self.training:` fallback beside the kernel's `else:`, or
    `x.float() if x.dtype == torch.float16 else x` in the call): the kernel sees the dtype its author chose (an autocastable op in
    forward is lowered whatever its input's dtype, so this counts for the
    extension case only). A public Function whose every application in its
    own file casts so (detrex's `MultiScaleDeformableAttnFunction`, applied
    by the module beside it) is silent too unless another file of the project
    spells its name where a low-precision autocast of the project may run
    that file's code (`embedded.unreached` does not hold): a caller this file
    does not show, which may hand it what autocast made. A test applying it to
    inputs it built, which no autocast of the project reaches, is no such
    caller; a user of a library who applies the Function directly instead of
    through its module takes on the cast its own module shows. Silent on a
    Function the file applies only inside the `backward` of its Functions (a
    double-backward helper such as `UpFirDn2dBackward`): autograd runs
    backward with autocast off, unless that backward is `custom_bwd`.
    Silent too on a Function a test module (`test_*.py`, `*_test.py`) or a
    `__main__` script applies only from its own entry points: its top level,
    a runner's `test*` functions (and `test*` methods of `Test*` classes), or
    functions the file only calls directly from them (Megatron-LM's
    `_ViewSavingLinear`, applied by a function nested in the test on inputs
    it built). The autocast of modules the file imports cannot wrap those
    calls; it is reported when the file's own code may enter autocast, a
    `conftest.py` in its folder or above may (an autouse fixture), or a
    project module imports the file. Not when an applying function is passed
    on as a value, or is a method (a module's `forward` runs wherever the
    module is called).
    Silent on a Function every application of which runs in a method
    decorated with mmcv's `@force_fp32()` (`mmcv.runner`, mmcv 1.x;
    `amplint/model/mmcv_fp16.py`) on a module that sets `fp16_enabled`, in
    a project that turns the flag on (`wrap_fp16_model(...)`,
    `Fp16OptimizerHook`, `fp16 = dict(...)` in a config): mmcv then casts the
    method's fp16 arguments to fp32 and runs it under `autocast(enabled=False)`,
    so the Function's forward runs in fp32 with autocast off (bevfusion's
    `bev_pool`, applied by `BaseTransform.bev_pool`). The applications
    followed are the file's own (`F.apply`, a module-level alias `f =
    F.apply`, an undecorated module-level function of the file applying it,
    such as `bev_pool(feats, coords, ...)`) and, read when conditions are
    resolved, the calls of those names in every other project file. Reported
    as before when any of them runs elsewhere (an `@auto_fp16()` method,
    which enters autocast, a plain `forward`, a function of another file), is
    handed on as a value or imported under another name, when the decorator
    names only some arguments (`apply_to=("pred",)`: the others keep the
    dtype autocast gave them), or when the module has no `fp16_enabled`
    (then `force_fp32` does nothing). mmengine, and mmcv 2.x, have no such
    decorators (only an `autocast` context manager, read as any region). A
    Function no program of a distributed package's project builds (a
    registered PointNet++ op no shipped config names) is still reported: its
    users may build it.
    The applications are looked for in the whole checkout (the folder holding
    `.git`), not only in the nearest packaging: a vendored package with its
    own `setup.py` (MapTR's `mmdetection3d/`) has its ops applied by the
    checkout's code around it (`forced_only`; the nearest packaging is read,
    as before, when the checkout is too large to read whole):
    ```text
    .git/
    mmdetection3d/setup.py
    mmdetection3d/mmdet3d/ops/bev_pool/bev_pool.py  # the Function, applied by bev_pool()
    projects/plugin/maptr/modules/encoder.py        # VALID: silent, bev_pool() only in an
                                                    #   @force_fp32() method, fp16_enabled set
    projects/plugin/other/encoder.py                # INVALID: reported once bev_pool() is
                                                    #   also called in an @auto_fp16() forward
    ```
    Silent likewise, with no flag needed, when every application runs in a
    function or method decorated with torch's
    `@custom_fwd(cast_inputs=torch.float32)` (`torch.cuda.amp.custom_fwd`,
    `torch.amp.custom_fwd(device_type=..., cast_inputs=torch.float32)`, or
    imported through a project module re-exporting it, GLIP's
    `maskrcnn_benchmark/utils/amp.py`): under autocast it casts the floating
    arguments to fp32 and turns autocast off (GLIP's `deform_conv`, applied
    by `DeformConv.forward`). A plain `@custom_fwd`, or `cast_inputs=` another
    dtype, keeps the finding. Another file's own module-level class or
    function of the same name (a second `QuickCumsumCuda` in
    `bev_pool_v2.py`) is not a use of the followed one.
    Silent on a Function whose forward raises on every float input that is
    not float32 (`if not (input.dtype == torch.float32): raise ...`, or `!=`):
    the kernel never gets mixed dtypes; an input held so to an integer dtype
    (`edges.dtype == torch.int64`) is not counted as a float input.
    The incoming grad is followed through views, splits and loops over them
    (`for i, (qc, doc) in enumerate(zip(q.split(b), do.split(b)))`, the
    blockwise backward of a memory-efficient attention).
    The extension case needs two or more of the forward's inputs passed to
    `torch.ops.<ns>.<op>` (not aten/torchvision) or to a module built by
    `torch.utils.cpp_extension.load`/`load_inline` or imported as a compiled
    extension (`_C`, `_ext`, `*_cuda`; also in a module-level `try:` block),
    with no explicit dtype cast in `forward`. An input that every application
    in the file hands an integer tensor is not counted: a factory with an
    integer `dtype=`, an integer cast, or a local or an attribute (by its
    name, any receiver) every assignment of the file sets to one
    (TransformerEngine's `_EpCombine`, given `buffer.handle_mem`, a uint8
    buffer, next to the one float input).

    Where the extension's C++/CUDA source is in the project, its text
    decides more (read when conditions are resolved, only for these
    findings; `amplint/model/kernels.py`): the function the binding
    (`m.def("fwd", &selective_scan_fwd)`, `TORCH_LIBRARY` blocks) names and
    the functions it calls. A kernel that dispatches the dtypes of two
    tensors separately, half or bf16 among them (mamba's selective scan:
    activations in fp16/bf16, weights in fp32), is built for what autocast
    produces: silent. A tensor the function requires to be float32 (a
    check of `x.scalar_type() == at::kFloat`) counts as one dispatched
    separately, next to another tensor dispatched with half among its types
    (`AT_DISPATCH_FLOATING_TYPES_AND_HALF`; NVIDIA's fused focal loss: fp16
    logits, an fp32 count of positives):
    ```cpp
    // VALID: silent, the logits may be fp16, the count is held to fp32
    AT_ASSERTM(num_pos.scalar_type() == at::kFloat, "num_pos must be float32");
    AT_DISPATCH_FLOATING_TYPES_AND_HALF(logits.scalar_type(), "fprop", [&] { ... });
    // INVALID: reported, the dispatched logits themselves are held to fp32
    AT_ASSERTM(logits.scalar_type() == at::kFloat, "logits must be float32");
    AT_DISPATCH_FLOATING_TYPES_AND_HALF(logits.scalar_type(), "fprop", [&] { ... });
    ```
    A kernel that dispatches float/double only
    (`AT_DISPATCH_FLOATING_TYPES`, or reads `data_ptr<float>()`) and names no
    half type raises `"..." not implemented for 'Half'` on one fp16 input:
    reported already when forward passes it a single float input.

    ## References
    - amplint's evidence page: `amplint --explain AMP501` (docs/evidence.md#amp501)
    - https://pytorch.org/docs/stable/notes/amp_examples.html#autocast-and-custom-autograd-functions
    """

    code = "AMP501"
    name = "custom-function-without-custom-fwd"
    severity = Severity.WARNING
    message = "autograd.Function without custom_fwd/custom_bwd in an autocast project"
    # every spelling of torch.autograd.Function names `autograd` in an import or the base
    triggers = ("autograd",)
    requires = (("forward",),)
    #: a finding depends only on the Function class and module-level names (imports, extension loaders)
    gate_sites = "amplint.core.gates:autograd_function_lines"

    VALID = [
        Valid(
            """
import torch
class LinearFn(torch.autograd.Function):
    @staticmethod
    @torch.amp.custom_fwd(device_type="cuda")
    def forward(ctx, x, w):
        ctx.save_for_backward(x, w)
        return x @ w.t()

    @staticmethod
    @torch.amp.custom_bwd(device_type="cuda")
    def backward(ctx, grad):
        x, w = ctx.saved_tensors
        return grad @ w, grad.t() @ x

with torch.autocast("cuda"):
    y = LinearFn.apply(x, w)
""",
            "decorated",
        ),
        Valid(
            """
import torch
import torch.distributed as dist
from torch.autograd import Function

class AllGather(Function):
    @staticmethod
    def forward(ctx, tensor):
        out = [torch.empty_like(tensor) for _ in range(dist.get_world_size())]
        dist.all_gather(out, tensor)
        ctx.rank = dist.get_rank()
        return torch.cat(out, 0)

    @staticmethod
    def backward(ctx, grad):
        dist.all_reduce(grad)
        return grad.chunk(dist.get_world_size())[ctx.rank]

with torch.autocast("cuda"):
    feats = AllGather.apply(model(x))
""",
            "only moves data (distributed gather / all-reduce)",
        ),
        Valid(
            """
import torch
class GradReverse(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, alpha):
        ctx.alpha = alpha
        return x.clone()

    @staticmethod
    def backward(ctx, grad):
        return -ctx.alpha * grad, None

with torch.autocast("cuda"):
    y = GradReverse.apply(model(x), 0.1)
""",
            "gradient reversal: clone and scale",
        ),
        Valid(
            """
import torch
class LinearFn(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, w):
        return x @ w.t()
""",
            "no autocast anywhere in the project",
        ),
        Valid(
            """
import torch
from torch.cuda.amp import custom_fwd, custom_bwd
class MyMM(torch.autograd.Function):
    @staticmethod
    @custom_fwd(cast_inputs=torch.float32)
    def forward(ctx, a, b):
        return a.mm(b)

with torch.cuda.amp.autocast():
    y = MyMM.apply(a, b)
""",
            "the deprecated decorator still makes it autocast-aware (AMP001 covers the spelling)",
        ),
        Valid(
            """
import torch
class SafeMM(torch.autograd.Function):
    @staticmethod
    def forward(ctx, a, b):
        with torch.autocast("cuda", enabled=False):
            return a.float() @ b.float()

with torch.autocast("cuda"):
    y = SafeMM.apply(a, b)
""",
            "forward disables autocast itself",
        ),
        Valid(
            """
import torch
class FusedInference(torch.autograd.Function):
    @staticmethod
    def forward(ctx, a, b):
        return torch.matmul(a, b)

with torch.autocast("cuda"):
    y = FusedInference.apply(a, b)
""",
            "no backward: an inference-only helper",
        ),
        Valid(
            """
import torch
from torch.fft import fft, ifft
class CircConv(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, w):
        ctx.save_for_backward(x, w)
        return fft(torch.einsum("...nb,mnb->...mb", ifft(x), fft(w))).real

    @staticmethod
    def backward(ctx, g):
        x, w = ctx.saved_tensors
        return fft(torch.einsum("...mb,mnb->...nb", fft(g), ifft(w))).real, None

with torch.autocast("cuda"):
    y = CircConv.apply(x, w)
""",
            "complex inputs from torch.fft are not autocast-eligible",
        ),
        Valid(
            """
import torch
class ZeroLinear(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, w):
        ctx.autocast = torch.is_autocast_enabled()
        ctx.save_for_backward(x, w)
        return x.matmul(w.t())

    @staticmethod
    def backward(ctx, g):
        x, w = ctx.saved_tensors
        with torch.autocast("cuda", enabled=ctx.autocast):
            return g.matmul(w), g.t().matmul(x)

with torch.autocast("cuda"):
    y = ZeroLinear.apply(x, w)
""",
            "backward replays the forward's autocast state by hand (DeepSpeed ZeRO-3 linear)",
        ),
        Valid(
            """
import torch
class ChunkedLogProb(torch.autograd.Function):
    @staticmethod
    def forward(ctx, hidden, weight):
        dtype = torch.get_autocast_dtype("cuda") if torch.is_autocast_enabled("cuda") else hidden.dtype
        ctx.dtype = dtype
        ctx.save_for_backward(hidden, weight)
        return torch.mm(hidden.to(dtype), weight.to(dtype).t())

    @staticmethod
    def backward(ctx, g):
        hidden, weight = ctx.saved_tensors
        return g.to(ctx.dtype).mm(weight.to(ctx.dtype)), None

with torch.autocast("cuda"):
    y = ChunkedLogProb.apply(h, w)
""",
            "reads the autocast dtype and casts by hand (TRL chunked log-prob)",
        ),
        Valid(
            """
import torch
import torch.nn.functional as F
class CompressedLinear(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, w):
        ctx.save_for_backward(x, w)
        return F.linear(x, w)

    @staticmethod
    def backward(ctx, g):
        x, w = ctx.saved_tensors
        dtype = g.dtype
        return g @ w.to(dtype), g.t() @ x.to(dtype)

with torch.autocast("cuda"):
    y = CompressedLinear.apply(h, w)
""",
            "backward casts the saved tensors to the grad's dtype (PEFT VeLoRA)",
        ),
        Valid(
            """
import torch
from project.quant import dequantize
class QuantLinear(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, qweight, scale):
        ctx.save_for_backward(qweight, scale)
        return x @ dequantize(qweight, scale, x.dtype).t()

    @staticmethod
    def backward(ctx, grad):
        qweight, scale = ctx.saved_tensors
        g = grad.reshape(-1, grad.shape[-1])
        w = dequantize(qweight, scale, g.dtype)
        return (g @ w).view(*grad.shape[:-1], -1), None, None

with torch.autocast("cuda"):
    y = QuantLinear.apply(h, qw, s)
""",
            "backward builds the weight it multiplies in the grad's dtype (axolotl's fp8 LoRA dequant)",
        ),
        Valid(
            """
import torch
class TiledMM(torch.autograd.Function):
    @staticmethod
    def forward(ctx, a, b):
        out = torch.empty(a.shape[0], b.shape[1], device=a.device)
        torch.mm(a, b, out=out)
        ctx.save_for_backward(a, b)
        return out

    @staticmethod
    def backward(ctx, g):
        a, b = ctx.saved_tensors
        return torch.mm(g, b.t()), torch.mm(a.t(), g)

with torch.autocast("cuda"):
    y = TiledMM.apply(a, b)
""",
            "`out=` calls are not autocast",
        ),
        Valid(
            """
import torch
from . import _C
class Sort(torch.autograd.Function):
    @staticmethod
    def forward(ctx, keys, values):
        return _C.sort_pairs(keys.float(), values.float())

with torch.autocast("cuda"):
    y = Sort.apply(k, v)
""",
            "extension inputs cast explicitly",
        ),
        # the drill (peft LoHa): the grad is multiplied elementwise by an fp32 product
        # first, which promotes it to fp32, so the matmuls in backward never mix dtypes
        Valid(
            """
import torch

class HadaWeight(torch.autograd.Function):
    @staticmethod
    def forward(ctx, w1a, w1b, w2a, w2b, scale=torch.tensor(1)):
        ctx.save_for_backward(w1a, w1b, w2a, w2b, scale)
        return ((w1a @ w1b) * (w2a @ w2b)) * scale

    @staticmethod
    def backward(ctx, grad_out):
        (w1a, w1b, w2a, w2b, scale) = ctx.saved_tensors
        grad_out = grad_out * scale
        temp = grad_out * (w2a @ w2b)
        grad_w1a = temp @ w1b.T
        grad_w1b = w1a.T @ temp
        return grad_w1a, grad_w1b, None, None, None

with torch.autocast("cuda"):
    w = HadaWeight.apply(a, b, c, d)
"""
        ),
        Valid(
            """
import torch
import torch.nn.functional as F
from torch.amp import autocast


class _ColumnLinear(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight):
        ctx.save_for_backward(x, weight)
        return F.linear(x, weight)

    @staticmethod
    def backward(ctx, grad):
        x, weight = ctx.saved_tensors
        return grad @ weight, grad.t() @ x


@autocast("cuda", enabled=False)
def rotary(x, freqs):
    return x.float() * freqs


def route(gate, x):
    with torch.autocast("cuda", dtype=torch.float32):
        return gate(x)
""",
            "the project never enables low-precision autocast: only `enabled=False` and fp32 regions (nanotron, torchtitan)",
        ),
        Valid(
            """
import torch
from torch.autograd import Function


class _ROIAlignRotated(Function):
    @staticmethod
    def forward(ctx, input, rois, scale):
        ctx.save_for_backward(rois)
        return torch.ops.detectron2.roi_align_rotated_forward(input, rois, scale)

    @staticmethod
    def backward(ctx, grad):
        (rois,) = ctx.saved_tensors
        return torch.ops.detectron2.roi_align_rotated_backward(grad, rois), None, None


roi_align_rotated = _ROIAlignRotated.apply


class ROIAlignRotated(torch.nn.Module):
    def forward(self, input, rois):
        orig_dtype = input.dtype
        if orig_dtype == torch.float16:
            input = input.float()
            rois = rois.float()
        return roi_align_rotated(input, rois, self.scale).to(dtype=orig_dtype)


with torch.autocast("cuda"):
    y = ROIAlignRotated()(x, rois)
""",
            "a private Function whose only caller casts the kernel's inputs by hand (detectron2 ROIAlignRotated)",
        ),
        Valid(
            """
import torch
from torch.autograd import Function
from torch.utils.cpp_extension import load

_ext = load("msda", sources=["msda.cpp", "msda_cuda.cu"])


class _MSDeformAttnFunction(Function):
    @staticmethod
    def forward(ctx, value, locations, weights):
        ctx.save_for_backward(value, locations, weights)
        return _ext.ms_deform_attn_forward(value, locations, weights)

    @staticmethod
    def backward(ctx, grad):
        value, locations, weights = ctx.saved_tensors
        return _ext.ms_deform_attn_backward(value, locations, weights, grad)


class MSDeformAttn(torch.nn.Module):
    def forward(self, value, locations, weights):
        out = _MSDeformAttnFunction.apply(
            value.to(torch.float32) if value.dtype == torch.float16 else value, locations, weights
        )
        return out.to(value.dtype)


with torch.autocast("cuda"):
    y = MSDeformAttn()(v, loc, w)
""",
            "the only caller casts the kernel's input when it is fp16, in the call (detrex multi-scale deformable attention)",
        ),
        Valid(
            """
import torch
from torch.autograd import Function
from torch.utils.cpp_extension import load

upfirdn2d_op = load("upfirdn2d", sources=["upfirdn2d.cpp", "upfirdn2d_kernel.cu"])


class UpFirDn2dBackward(Function):
    @staticmethod
    def forward(ctx, grad_output, kernel, grad_kernel):
        ctx.save_for_backward(kernel)
        return upfirdn2d_op.upfirdn2d(grad_output, grad_kernel)

    @staticmethod
    def backward(ctx, gradgrad_input):
        (kernel,) = ctx.saved_tensors
        return upfirdn2d_op.upfirdn2d(gradgrad_input, kernel), None, None


class UpFirDn2d(Function):
    @staticmethod
    def forward(ctx, input, kernel):
        ctx.save_for_backward(kernel)
        return upfirdn2d_op.upfirdn2d(input.float(), kernel.float())

    @staticmethod
    def backward(ctx, grad_output):
        (kernel,) = ctx.saved_tensors
        return UpFirDn2dBackward.apply(grad_output, kernel, torch.flip(kernel, [0, 1])), None


with torch.autocast("cuda"):
    y = UpFirDn2d.apply(x, k)
""",
            "a double-backward helper applied only in another Function's backward, where autocast is off",
        ),
        Valid(
            """
import torch


class CheckpointFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, run_function, *args):
        ctx.run_function = run_function
        ctx.autocast_kwargs = {"enabled": torch.is_autocast_enabled(), "dtype": torch.get_autocast_gpu_dtype()}
        ctx.save_for_backward(*args)
        with torch.no_grad():
            return run_function(*args)

    @staticmethod
    def backward(ctx, *grads):
        args = [a.detach().requires_grad_() for a in ctx.saved_tensors]
        with torch.enable_grad(), torch.cuda.amp.autocast(**ctx.autocast_kwargs):
            out = ctx.run_function(*args)
        return (None, *torch.autograd.grad(out, args, grads))


class LinearFn(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, w):
        ctx.save_for_backward(x, w)
        return x @ w.t()

    @staticmethod
    def backward(ctx, grad):
        x, w = ctx.saved_tensors
        return grad @ w, grad.t() @ x
""",
            "the only autocast replays the state a checkpoint's forward captured: the project enters none (ControlNet's ldm)",
        ),
        Valid(
            """
import torch
from megatron.core.tensor_parallel.random import CheckpointWithoutOutput


class _ViewSavingLinear(torch.autograd.Function):
    @staticmethod
    def forward(ctx, inp, weight):
        ctx.save_for_backward(inp, weight)
        return inp.matmul(weight.t())

    @staticmethod
    def backward(ctx, grad_output):
        inp, weight = ctx.saved_tensors
        return grad_output.matmul(weight), grad_output.t().matmul(inp)


def test_view_sharing_regression():
    def normal_forward(input_, weight):
        return _ViewSavingLinear.apply(torch.nn.functional.gelu(input_), weight)

    x = torch.randn(3, 8, requires_grad=True)
    normal_forward(x, torch.randn(6, 8, requires_grad=True)).sum().backward()
""",
            "a test's own Function, applied only from its test on inputs it built (Megatron-LM's test_random.py)",
        ),
        Valid(
            """
import torch


class Buffer:
    def __init__(self, n, device):
        self.handle_mem = torch.empty(n, dtype=torch.uint8, device=device)


class _Combine(torch.autograd.Function):
    @staticmethod
    def forward(ctx, handle_mem, expert_out):
        result = torch.empty_like(expert_out)
        torch.ops.ep.combine(handle_mem, expert_out, result)
        ctx.save_for_backward(handle_mem)
        return result

    @staticmethod
    def backward(ctx, g):
        (handle_mem,) = ctx.saved_tensors
        grad = torch.empty_like(g)
        torch.ops.ep.combine_bwd(handle_mem, g, grad)
        return None, grad


def combine(buffer, expert_out):
    return _Combine.apply(buffer.handle_mem, expert_out)


with torch.autocast("cuda"):
    y = combine(Buffer(64, "cuda"), model(x))
""",
            "the kernel's other input is a uint8 handle every application passes (TransformerEngine's EP combine)",
        ),
        Valid(
            """
import torch
from mmcv.runner import force_fp32, wrap_fp16_model
from torch.autograd import Function

import bev_pool_ext


class _BevPool(Function):
    @staticmethod
    def forward(ctx, feats, coords, ranks):
        ctx.save_for_backward(coords, ranks)
        return bev_pool_ext.forward(feats, coords, ranks)

    @staticmethod
    def backward(ctx, grad):
        coords, ranks = ctx.saved_tensors
        return bev_pool_ext.backward(grad, coords, ranks), None, None


class BevPool(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fp16_enabled = False

    @force_fp32()
    def forward(self, feats, coords, ranks):
        return _BevPool.apply(feats, coords, ranks)


def train(model, batch):
    wrap_fp16_model(model)
    with torch.autocast("cuda", dtype=torch.float16):
        loss = model(batch).sum()
    loss.backward()
""",
            "every application is in an mmcv `@force_fp32()` method of a module with `fp16_enabled`: fp32 inputs, no autocast (bevfusion's bev_pool)",
        ),
        Valid(
            """
import torch
from torch.autograd import Function
from torch.cuda.amp import custom_fwd

from . import _C


class _DeformConv(Function):
    @staticmethod
    def forward(ctx, input, offset, weight):
        ctx.save_for_backward(input, offset, weight)
        return _C.deform_conv_forward(input, offset, weight)

    @staticmethod
    def backward(ctx, grad):
        return _C.deform_conv_backward(grad, *ctx.saved_tensors)


class DeformConv(torch.nn.Module):
    @custom_fwd(cast_inputs=torch.float32)
    def forward(self, input, offset):
        return _DeformConv.apply(input, offset, self.weight)


with torch.autocast("cuda"):
    y = DeformConv()(x, off)
""",
            "every application is in a `custom_fwd(cast_inputs=torch.float32)` function: fp32 inputs, autocast off (GLIP's deform_conv)",
        ),
        Valid(
            """
import torch
from torch.autograd import Function

from . import _C


class GatherScatter(Function):
    @staticmethod
    def forward(ctx, input, weight, edges):
        if not (input.dtype == torch.float32):
            raise ValueError("input has to be of type torch.float32.")
        if weight.dtype != torch.float32:
            raise ValueError("weight has to be of type torch.float32.")
        if not (edges.dtype == torch.int64):
            raise ValueError("edges has to be of type torch.int64.")
        ctx.save_for_backward(weight, edges)
        return _C.gather_scatter(input, weight, edges)

    @staticmethod
    def backward(ctx, grad):
        weight, edges = ctx.saved_tensors
        return _C.gather_scatter(grad, weight, edges), None, None


with torch.autocast("cuda"):
    y = GatherScatter.apply(x, w, e)
""",
            "forward raises on every float input that is not float32: the kernel never gets mixed dtypes (pytorch3d)",
        ),
    ]

    INVALID = [
        Invalid(
            """
import torch
import lightconv_cuda
from torch.autograd import Function


class lightconvFunction(Function):
    @staticmethod
    def forward(ctx, x, weights):
        ctx.save_for_backward(x, weights)
        return lightconv_cuda.forward(x, weights)[0]

    @staticmethod
    def backward(ctx, grad_output):
        return tuple(lightconv_cuda.backward(grad_output.contiguous(), *ctx.saved_tensors))


class LightconvLayer(torch.nn.Module):
    def forward(self, x):
        if not self.training:
            weight = torch.softmax(self.weight.float(), dim=1).type_as(self.weight)
            return torch.bmm(x, weight)
        else:
            weight = torch.softmax(self.weight, -1)
            return lightconvFunction.apply(x.contiguous(), weight)


def train_step(model, batch):
    with torch.autocast("cuda"):
        return model(batch)
""",
            line=8,
            why="the cast of `weight` sits in the other branch (the inference fallback): the kernel gets it uncast",
        ),
        Invalid(
            """
import torch


class Buffer:
    def __init__(self, n, device):
        self.handle_mem = torch.empty(n, dtype=torch.uint8, device=device)


class _Combine(torch.autograd.Function):
    @staticmethod
    def forward(ctx, handle_mem, expert_out):
        result = torch.empty_like(expert_out)
        torch.ops.ep.combine(handle_mem, expert_out, result)
        ctx.save_for_backward(handle_mem)
        return result

    @staticmethod
    def backward(ctx, g):
        (handle_mem,) = ctx.saved_tensors
        grad = torch.empty_like(g)
        torch.ops.ep.combine_bwd(handle_mem, g, grad)
        return None, grad


def combine(buffer, expert_out):
    return _Combine.apply(buffer.handle_mem, expert_out)


def reset(buffer, like):
    buffer.handle_mem = torch.zeros_like(like)


with torch.autocast("cuda"):
    y = combine(Buffer(64, "cuda"), model(x))
""",
            line=11,
            why="another assignment makes the handle a float tensor: two float inputs (the VALID twin only sets uint8)",
        ),
        Invalid(
            """
import torch
from project.quant import dequantize
class QuantLinear(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, qweight, scale):
        ctx.save_for_backward(x, qweight, scale)
        return x @ dequantize(qweight, scale, x.dtype).t()

    @staticmethod
    def backward(ctx, grad):
        x, qweight, scale = ctx.saved_tensors
        w = dequantize(qweight, scale, x.dtype)
        return grad @ w, None, None

with torch.autocast("cuda"):
    y = QuantLinear.apply(h, qw, s)
""",
            line=5,
            why="the weight is built in the saved input's dtype (fp32), not the grad's (bf16 under autocast)",
        ),
        Invalid(
            """
import torch
import torch.distributed as dist

class AsyncColumnParallel(torch.autograd.Function):
    @staticmethod
    def forward(ctx, group, input, weight, bias):
        ctx.group = group
        output = torch.matmul(input, weight.transpose(-1, -2))
        ctx.save_for_backward(input, weight)
        return output

    @staticmethod
    def backward(ctx, grad_output):
        input, weight = ctx.saved_tensors
        grad_input = grad_output.matmul(weight)
        handle = dist.all_reduce(grad_input.contiguous(), group=ctx.group, async_op=True)
        grad_weight = grad_output.view(-1, grad_output.shape[-1]).t().matmul(input.view(-1, input.shape[-1]))
        handle.wait()
        return None, grad_input, grad_weight, None

def train_step(engine, batch):
    with torch.autocast("cuda", dtype=torch.float16):
        return engine(batch)
""",
            line=6,
        ),
        Invalid(
            """
import torch

class LinearFn(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, w):
        ctx.save_for_backward(x, w)
        return x @ w.t()

    @staticmethod
    def backward(ctx, grad):
        x, w = ctx.saved_tensors
        return grad @ w, grad.t() @ x

class Trainer:
    def step(self, x):
        with torch.autocast("cuda", dtype=torch.bfloat16):
            return LinearFn.apply(x, self.w)
""",
            line=5,
        ),
        Invalid(
            """
from torch.autograd import Function as F
import torch.nn.functional as nnf

class FusedProj(F):
    @staticmethod
    def forward(ctx, x, weight, bias):
        ctx.save_for_backward(x, weight)
        return nnf.linear(x, weight, bias)

    @staticmethod
    def backward(ctx, grad):
        x, weight = ctx.saved_tensors
        return grad.mm(weight), grad.t().mm(x), grad.sum(0)

with torch.amp.autocast("cuda"):
    out = FusedProj.apply(h, w, b)
""",
            line=6,
        ),
        Invalid(
            """
import torch
import torch.autograd as ag
from torch.utils.cpp_extension import load

deform = load(name="deform_conv", sources=["deform_conv.cpp", "deform_conv_cuda.cu"])

class DeformConvFunction(ag.Function):
    @staticmethod
    def forward(ctx, input, offset, weight, stride=1):
        ctx.save_for_backward(input, offset, weight)
        return deform.forward(input, weight, offset, stride)

    @staticmethod
    def backward(ctx, grad_output):
        input, offset, weight = ctx.saved_tensors
        return deform.backward(grad_output, input, weight, offset)

def train(model, loader, use_amp):
    for x in loader:
        with torch.autocast("cuda", enabled=use_amp):
            loss = model(x).mean()
""",
            line=9,
        ),
        Invalid(
            """
import torch

class Attention(torch.autograd.function.Function):
    @staticmethod
    def forward(ctx, q, k, v):
        scores = torch.einsum("bhqd,bhkd->bhqk", q, k)
        probs = scores.softmax(-1)
        ctx.save_for_backward(q, k, v, probs)
        return torch.bmm(probs, v)

    @staticmethod
    def backward(ctx, grad):
        q, k, v, probs = ctx.saved_tensors
        grad_v = torch.bmm(probs.transpose(1, 2), grad)
        return None, None, grad_v

with torch.cpu.amp.autocast():
    y = Attention.apply(q, k, v)
""",
            line=5,
        ),
        Invalid(
            """
import torch
from torch.autograd import Function


class _DeformConv(Function):
    @staticmethod
    def forward(ctx, input, offset, weight, stride=1):
        ctx.save_for_backward(input, offset, weight)
        output = input.new_empty(input.shape)
        _C.deform_conv_forward(input, weight, offset, output, stride)
        return output

    @staticmethod
    def backward(ctx, grad_output):
        input, offset, weight = ctx.saved_tensors
        grad_input = torch.zeros_like(input)
        _C.deform_conv_backward_input(input, offset, grad_output, grad_input, weight)
        return grad_input, None, None, None


deform_conv = _DeformConv.apply


class DeformConv(torch.nn.Module):
    def forward(self, x, offset):
        return deform_conv(x, offset, self.weight, self.stride)


try:
    from detectron2 import _C
except ImportError:
    _C = None


def train_step(model, batch):
    with torch.autocast("cuda"):
        return model(batch)
""",
            line=7,
            why="the extension is imported in a module-level try block; the caller passes the conv output uncast",
        ),
        Invalid(
            """
import torch


class FlashAttentionFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, bucket):
        o = torch.zeros_like(q)
        for qc, oc in zip(q.split(bucket, dim=-2), o.split(bucket, dim=-2)):
            oc.copy_(torch.einsum("... i d, ... j d -> ... i j", qc, k).softmax(-1) @ v)
        ctx.save_for_backward(q, k, v)
        ctx.bucket = bucket
        return o

    @staticmethod
    def backward(ctx, do):
        q, k, v = ctx.saved_tensors
        dv = torch.zeros_like(v)
        row_splits = zip(q.split(ctx.bucket, dim=-2), do.split(ctx.bucket, dim=-2))
        for ind, (qc, doc) in enumerate(row_splits):
            p = torch.einsum("... i d, ... j d -> ... i j", qc, k).softmax(-1)
            dv.add_(torch.einsum("... i j, ... i d -> ... j d", p, doc))
        return None, None, dv, None


def step(model, x):
    with torch.autocast("cuda"):
        return model(x)
""",
            line=6,
            why="the grad reaches backward's einsum blockwise, through a loop over zip(..., do.split(...))",
        ),
        Invalid(
            """
import torch
from mmcv.runner import auto_fp16, wrap_fp16_model
from torch.autograd import Function

import bev_pool_ext


class _BevPool(Function):
    @staticmethod
    def forward(ctx, feats, coords, ranks):
        ctx.save_for_backward(coords, ranks)
        return bev_pool_ext.forward(feats, coords, ranks)

    @staticmethod
    def backward(ctx, grad):
        coords, ranks = ctx.saved_tensors
        return bev_pool_ext.backward(grad, coords, ranks), None, None


class BevPool(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fp16_enabled = False

    @auto_fp16()
    def forward(self, feats, coords, ranks):
        return _BevPool.apply(feats, coords, ranks)


def train(model, batch):
    wrap_fp16_model(model)
    with torch.autocast("cuda", dtype=torch.float16):
        loss = model(batch).sum()
    loss.backward()
""",
            line=10,
            why="mmcv's `@auto_fp16()` runs the method under autocast: the kernel gets fp16 features",
        ),
        Invalid(
            """
import torch
from mmcv.runner import force_fp32, wrap_fp16_model
from torch.autograd import Function

import bev_pool_ext


class _BevPool(Function):
    @staticmethod
    def forward(ctx, feats, coords, ranks):
        ctx.save_for_backward(coords, ranks)
        return bev_pool_ext.forward(feats, coords, ranks)

    @staticmethod
    def backward(ctx, grad):
        coords, ranks = ctx.saved_tensors
        return bev_pool_ext.backward(grad, coords, ranks), None, None


class BevPool(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.pool_size = 4

    @force_fp32()
    def forward(self, feats, coords, ranks):
        return _BevPool.apply(feats, coords, ranks)


def train(model, batch):
    wrap_fp16_model(model)
    with torch.autocast("cuda", dtype=torch.float16):
        loss = model(batch).sum()
    loss.backward()
""",
            line=10,
            why="`@force_fp32()` on a module without `fp16_enabled` does nothing: the caller's autocast reaches the kernel",
        ),
        Invalid(
            """
import torch
from torch.autograd import Function
from torch.cuda.amp import custom_fwd

from . import _C


class _DeformConv(Function):
    @staticmethod
    def forward(ctx, input, offset, weight):
        ctx.save_for_backward(input, offset, weight)
        return _C.deform_conv_forward(input, offset, weight)

    @staticmethod
    def backward(ctx, grad):
        return _C.deform_conv_backward(grad, *ctx.saved_tensors)


class DeformConv(torch.nn.Module):
    @custom_fwd
    def forward(self, input, offset):
        return _DeformConv.apply(input, offset, self.weight)


with torch.autocast("cuda"):
    y = DeformConv()(x, off)
""",
            line=10,
            why="`@custom_fwd` without `cast_inputs` casts nothing: the kernel gets autocast's fp16 next to the fp32 weight",
        ),
        Invalid(
            """
import torch
from torch.autograd import Function

from . import _C


class GatherScatter(Function):
    @staticmethod
    def forward(ctx, input, weight, edges):
        if not (input.dtype == torch.float32):
            raise ValueError("input has to be of type torch.float32.")
        if not (edges.dtype == torch.int64):
            raise ValueError("edges has to be of type torch.int64.")
        ctx.save_for_backward(weight, edges)
        return _C.gather_scatter(input, weight, edges)

    @staticmethod
    def backward(ctx, grad):
        weight, edges = ctx.saved_tensors
        return _C.gather_scatter(grad, weight, edges), None, None


with torch.autocast("cuda"):
    y = GatherScatter.apply(x, w, e)
""",
            line=9,
            why="only `input` is held to float32: autocast's fp16 `weight` still meets it in the kernel",
        ),
    ]

    def check(self, ctx: ModuleContext) -> Iterator[Diagnostic]:
        functions = _function_classes(ctx)
        if not functions:
            return
        extensions = _extension_names(ctx)
        names = _name_counts(ctx.module) if any(f"{c.name.value}.apply" in ctx.source for c in functions) else {}
        scopes = {id(s.node): s for s in ctx.scopes}
        script = _runs_as_script(ctx)
        for cls in functions:
            # a public Function of an importable module runs under its users' autocast
            condition = AUTOCAST_REACHED if script or not _public(ctx, cls) else AUTOCAST_OR_LIBRARY
            methods = _methods(cls)
            forward, backward = methods.get("forward"), methods.get("backward")
            if forward is None or backward is None:
                continue  # inference-only helper: nothing runs outside autocast
            if any(_is_amp_decorator(ctx, d) for m in methods.values() for d in m.decorators):
                continue
            fwd, bwd = scopes.get(id(forward)), scopes.get(id(backward))
            if fwd is None or bwd is None:
                continue
            if any(_manages_autocast(ctx, scopes.get(id(m))) for m in methods.values()):
                continue  # the author manages autocast by hand (replays it in backward, reads its dtype)
            if _casts_by_hand(ctx, bwd) or _builds_in_grad_dtype(ctx, bwd, backward):
                continue  # backward converts dtypes itself (`w.to(grad.dtype)`, `.float()`, `dequant(q, s, g.dtype)`)
            applied = _applications(ctx, cls, names)
            if _only_in_backward(ctx, applied, functions):
                continue  # applied only in another Function's backward: autocast is off there
            if _entries_only(ctx, applied, names):
                # only the file's own entry points apply it (a test's Function on inputs it built),
                # and the file enters no autocast: only a conftest's fixture or an importer may
                condition = with_requirement(condition, RUNNER_AUTOCAST)
            setup_context = "setup_context" in methods
            forcing = "force_fp32" in ctx.source or "cast_inputs" in ctx.source
            if forcing and cls.name.value.startswith("_") and forced_in_file(ctx.source, cls.name.value):
                # a private one applied only in mmcv `@force_fp32()` methods or `custom_fwd(cast_inputs=torch.float32)`
                # functions here: fp32 inputs, autocast off
                continue
            # silent when its every application runs in such a method, wherever the project applies it
            condition = with_requirement(condition, UNFORCED, cls.name.value)
            in_backward = _grad_meets_op(ctx, bwd, backward) or _extension_call(ctx, bwd, backward, True, extensions, 1)
            if not in_backward:
                continue  # the incoming grad never reaches a dtype-sensitive op
            op = _autocastable_op(ctx, fwd, forward)
            if op is not None:
                message = f"`{cls.name.value}.forward` runs `{op}` under autocast, but backward will not"
                help = "Decorate forward with `@torch.amp.custom_fwd(device_type=...)`, backward with `custom_bwd`"
                yield ctx.diagnostic(self, forward.name, message, condition=condition, data={"op": op, "kind": "autocastable-op", **_class_data(ctx, cls)}, help=help)
                continue
            help = "Use `@torch.amp.custom_fwd(device_type=..., cast_inputs=torch.float32)`"
            if _callers_cast(ctx, cls, applied):
                if cls.name.value.startswith("_"):
                    continue  # every caller hands the kernel inputs cast by hand (`input = input.float()`)
                # a public one: also applied elsewhere, where autocast may reach it
                condition = with_requirement(condition, CALLED_ELSEWHERE, cls.name.value)
            # an input every application hands an integer tensor (a handle, an index) is no float input
            integral = _integer_inputs(ctx, forward, setup_context, applied)
            guarded = _rejected_dtypes(ctx, forward)
            integral = integral | {p for p, d in guarded.items() if d in _INTEGER_DTYPES}
            floats = [p.name.value for p in forward.params.params if not _config_default(p.default)][0 if setup_context else 1:]
            floats = [p for p in floats if p not in integral]
            if floats and all(guarded.get(p) in ("torch.float32", "torch.float") for p in floats):
                continue  # forward raises on every float input that is not float32: no mixed dtypes reach the kernel
            kernel = _extension_call(ctx, fwd, forward, setup_context, extensions, 2, integral)
            if kernel is not None:
                name, count = kernel
                message = f"`{cls.name.value}.forward` passes {count} float inputs to `{name}`, which is not autocast-aware"
                if len(message) >= 100:  # a long receiver (`ext_module.deform_conv_forward`): the kernel's own name says it
                    message = f"`{cls.name.value}.forward` passes {count} float inputs to `{name.rsplit('.', 1)[-1]}`, not autocast-aware"
                if len(message) >= 100:  # a long class and kernel name too: the class alone names the forward
                    message = f"`{cls.name.value}` passes {count} float inputs to `{name.rsplit('.', 1)[-1]}`, not autocast-aware"
                # silent when the project's source of the kernel is built for fp16/bf16 inputs next to fp32 weights
                needs = with_requirement(condition, KERNEL_NOT_MIXED, name.rsplit(".", 1)[-1])
                yield ctx.diagnostic(self, forward.name, message, condition=needs, data={"op": name, "kind": "extension", **_class_data(ctx, cls)}, help=help)
                continue
            kernel = _extension_call(ctx, fwd, forward, setup_context, extensions, 1, integral)
            if kernel is not None and kernel[1] == 1:
                name = kernel[0]
                message = f"`{cls.name.value}.forward` passes a float input to `{name}`, whose kernel takes float32 only"
                # reported only when the project's source shows the kernel dispatches float/double only
                needs = with_requirement(condition, KERNEL_FP32, name.rsplit(".", 1)[-1])
                yield ctx.diagnostic(self, forward.name, message, condition=needs, data={"op": name, "kind": "extension", **_class_data(ctx, cls)}, help=help)


def _runs_as_script(ctx: ModuleContext) -> bool:
    """The module has an `if __name__ == "__main__":` block: a script, not a library module."""
    for stmt in ctx.module.body:
        if isinstance(stmt, cst.If) and "__main__" in ctx.code_for(stmt.test) and "__name__" in ctx.code_for(stmt.test):
            return True
    return False


def _public(ctx: ModuleContext, cls: cst.ClassDef) -> bool:
    """A module-level class whose name does not start with `_`: importable by users."""
    return not cls.name.value.startswith("_") and any(stmt is cls for stmt in ctx.module.body)  # no parent map of the file


def _class_data(ctx: ModuleContext, cls: cst.ClassDef) -> dict:
    """What the verifier needs to rebuild the Function: its source and import bindings."""
    return {"class_name": cls.name.value, "snippet": ctx.code_for(cls).strip(), "names": imported_names(ctx, cls)}


def _function_classes(ctx: ModuleContext) -> List[cst.ClassDef]:
    found: List[cst.ClassDef] = []
    local: Set[str] = set()
    changed = True
    while changed:
        changed = False
        for cls in ctx.classes:
            if cls in found:
                continue
            for base in cls.bases:
                names = ctx.qualnames(base.value)
                spelled = ctx.code_for(base.value)
                if names & AUTOGRAD_FUNCTION or (not names and spelled in local):
                    found.append(cls)
                    local.add(cls.name.value)
                    changed = True
                    break
    return found


def _methods(cls: cst.ClassDef) -> dict:
    out = {}
    body = cls.body.body if isinstance(cls.body, cst.IndentedBlock) else ()
    for stmt in body:
        if isinstance(stmt, cst.FunctionDef):
            out[stmt.name.value] = stmt
    return out


def _is_amp_decorator(ctx: ModuleContext, decorator: cst.Decorator) -> bool:
    expr = decorator.decorator
    if isinstance(expr, cst.Call):
        expr = expr.func
    names = ctx.qualnames(expr)
    if names & (CUSTOM_FWD_BWD | frozenset(AUTOCAST_CONTEXTS)):
        return True
    last = ctx.code_for(expr).rsplit(".", 1)[-1]
    # a local wrapper (`custom_fwd = partial(...)`, `amp_custom_fwd`): the author handled it
    return "custom_fwd" in last or "custom_bwd" in last or "autocast" in last


_AUTOCAST_STATE = frozenset(
    {"torch.is_autocast_enabled", "torch.get_autocast_dtype", "torch.get_autocast_gpu_dtype", "torch.get_autocast_cpu_dtype"}
)


def _manages_autocast(ctx: ModuleContext, scope: Optional[Scope]) -> bool:
    """The method opens an autocast region or reads the autocast state."""
    if scope is None:
        return False
    if any(call.qualnames & _AUTOCAST_STATE for call in scope.calls):
        return True
    return _opens_autocast(ctx, scope)


def _opens_autocast(ctx: ModuleContext, scope: Optional[Scope]) -> bool:
    if scope is None:
        return False
    for region in ctx.regions:
        info = ctx.call_info(region.call)
        if info is not None and info.scope is scope:
            return True
    return False


class _MatMul(cst.CSTVisitor):
    """Finds `a @ b` / `a @= b` in a function body, not in nested functions."""

    def __init__(self) -> None:
        self.found = False
        self.depth = 0
        self.operands: List[cst.BaseExpression] = []

    def visit_FunctionDef(self, node: cst.FunctionDef) -> bool:
        self.depth += 1
        return self.depth == 1

    def leave_FunctionDef(self, original_node: cst.FunctionDef) -> None:
        self.depth -= 1

    def visit_BinaryOperation(self, node: cst.BinaryOperation) -> None:
        if isinstance(node.operator, cst.MatrixMultiply):
            self.found = True
            self.operands += [node.left, node.right]

    def visit_AugAssign(self, node: cst.AugAssign) -> None:
        if isinstance(node.operator, cst.MatrixMultiplyAssign):
            self.found = True
            self.operands += [node.target, node.value]


def _autocastable_op(ctx: ModuleContext, scope: Scope, forward: cst.FunctionDef) -> Optional[str]:
    for call in scope.calls:
        if call.arg(None, "out") is not None:
            continue  # `out=` calls are not autocast
        hit = call.qualnames & AUTOCAST_LOWER_PRECISION_FUNCS
        if hit and not _complex_input(ctx, call.node):
            return sorted(hit)[0]
        if (
            call.method in AUTOCAST_LOWER_PRECISION_METHODS
            and not call.qualnames
            and call.receiver is not None
            and not _is_module_name(ctx, call.receiver_dotted)
        ):
            return f".{call.method}()"
    visitor = _MatMul()
    forward.visit(visitor)
    return "@ (matmul)" if visitor.found else None


#: methods that keep a tensor's dtype (the grad stays low precision through them)
_DTYPE_KEEPING = frozenset(
    {"view", "reshape", "t", "transpose", "permute", "contiguous", "unsqueeze", "squeeze", "flatten",
     "expand", "expand_as", "narrow", "clone", "detach", "view_as", "reshape_as", "chunk", "split"}
)


def _grad_meets_op(ctx: ModuleContext, scope: Scope, backward: cst.FunctionDef) -> Optional[str]:
    """An autocastable op in `backward` fed the incoming grad itself (or a view of it).

    The E09 failure is a low-precision grad meeting an fp32 saved tensor in a
    matmul-like op. A grad first combined elementwise with an fp32 tensor is
    promoted to fp32 (§1.1 unlisted ops promote), so a matmul on the result is safe.
    """
    ops: List[Tuple[str, List[cst.BaseExpression]]] = []
    for call in scope.calls:
        if (call.qualnames & AUTOCAST_LOWER_PRECISION_FUNCS) and not _complex_input(ctx, call.node):
            ops.append((sorted(call.qualnames & AUTOCAST_LOWER_PRECISION_FUNCS)[0], [a.value for a in call.node.args if a.keyword is None]))
        elif call.method in AUTOCAST_LOWER_PRECISION_METHODS and not call.qualnames and call.receiver is not None:
            ops.append((f".{call.method}()", [call.receiver] + [a.value for a in call.node.args if a.keyword is None]))
    visitor = _MatMul()
    backward.visit(visitor)
    if visitor.operands:
        ops.append(("@ (matmul)", visitor.operands))
    if not ops:
        return None
    params = [p.name.value for p in backward.params.params][1:]  # after ctx
    grads = _grad_names(ctx, scope, set(params), [])
    found = next((name for name, operands in ops if any(_from_grad(o, grads) for o in operands)), None)
    if found is None:  # the grad may reach an op only blockwise, through a loop over its splits
        grads = _grad_names(ctx, scope, grads, _loop_bindings(backward))
        found = next((name for name, operands in ops if any(_from_grad(o, grads) for o in operands)), None)
    return found


def _grad_names(ctx: ModuleContext, scope: Scope, grads: Set[str], loops: List[Tuple[str, cst.BaseExpression]]) -> Set[str]:
    """`grads` and the names bound to a view of one, or to a piece of one by a loop."""
    grads = set(grads)
    changed = True
    while changed:
        changed = False
        for a in ctx.assignments:
            if a.scope is scope and "." not in a.target and a.target not in grads and _from_grad(a.value, grads):
                grads.add(a.target)
                changed = True
        for target, value in loops:
            if target not in grads and _from_grad(value, grads):
                grads.add(target)
                changed = True
    return grads


def _loop_bindings(function: cst.FunctionDef) -> List[Tuple[str, cst.BaseExpression]]:
    """(name, what it iterates over) for the loop targets of `function`'s own body:
    `for g in grad.split(n)` binds `g` to a piece of `grad.split(n)`; `for i, (a, g) in
    enumerate(zip(x.split(n), grad.split(n)))` binds `g` to a piece of `grad.split(n)`
    (the blockwise backward of a memory-efficient attention)."""
    found: List[Tuple[str, cst.BaseExpression]] = []
    fors: List[cst.For] = []
    zipped: Dict[str, Optional[cst.Call]] = {}  # `row_splits = zip(...)`: a loop may iterate over the name
    for node in subnodes(function.body):  # (nested functions' loops too: a superset, harmless)
        if isinstance(node, cst.For):
            fors.append(node)
        elif isinstance(node, cst.Assign) and len(node.targets) == 1 and isinstance(node.targets[0].target, cst.Name):
            if isinstance(node.value, cst.Call):
                name = node.targets[0].target.value
                zipped[name] = None if name in zipped else node.value
    if not fors:
        return found
    for loop in fors:
        _pair(loop.target, loop.iter, zipped, found)
    return found


def _pair(target: cst.BaseExpression, source: cst.BaseExpression, zipped: dict, found: List[Tuple[str, cst.BaseExpression]]) -> None:
    """Bind each name of a loop target to what it iterates over (through enumerate and zip)."""
    if isinstance(source, cst.Name) and zipped.get(source.value) is not None:
        source = zipped[source.value]
    if isinstance(source, cst.Call) and isinstance(source.func, cst.Name) and source.func.value in ("enumerate", "zip"):
        args = [a.value for a in source.args if a.keyword is None and not a.star]
        if source.func.value == "enumerate":
            if len(args) == 1 and isinstance(target, (cst.Tuple, cst.List)) and len(target.elements) == 2:
                _pair(target.elements[1].value, args[0], zipped, found)
            return
        if isinstance(target, (cst.Tuple, cst.List)) and len(target.elements) == len(args):
            for element, arg in zip(target.elements, args):
                _pair(element.value, arg, zipped, found)
        return
    if isinstance(target, cst.Name):
        found.append((target.value, source))


def _from_grad(expr: cst.BaseExpression, grads: Set[str]) -> bool:
    """`expr` is a grad or a dtype-keeping view of one (`grad.t()`, `grad[i]`, `grad.view(-1, d)`)."""
    while True:
        if isinstance(expr, cst.Name):
            return expr.value in grads
        if isinstance(expr, cst.Subscript):
            expr = expr.value
        elif isinstance(expr, cst.Attribute) and expr.attr.value in ("T", "mT", "H", "data"):
            expr = expr.value
        elif (
            isinstance(expr, cst.Call)
            and isinstance(expr.func, cst.Attribute)
            and expr.func.attr.value in _DTYPE_KEEPING
        ):
            expr = expr.func.value
        else:
            return False


def _complex_input(ctx: ModuleContext, call: cst.Call) -> bool:
    """An argument straight out of `torch.fft`: complex, so not eligible for autocast."""
    for arg in call.args:
        if isinstance(arg.value, cst.Call) and any(q.startswith("torch.fft.") for q in ctx.qualnames(arg.value.func)):
            return True
    return False


def _name_counts(module: cst.Module) -> Dict[str, int]:
    """How often each Name and each `X.apply` occurs in the module (one walk for all Functions)."""
    counts: Dict[str, int] = {}
    for n in _names(module):
        counts[n] = counts.get(n, 0) + 1
    return counts


def _applications(ctx: ModuleContext, cls: cst.ClassDef, names: Dict[str, int]) -> Optional[List[CallInfo]]:
    """Every call in the file that applies the Function, directly (`F.apply(x)`) or through a
    module-level alias (`roi_align = F.apply`); None when there is none, or when `F.apply`
    (or its alias) is also used in another way (passed on, stored on `self`): callers unseen."""
    name = cls.name.value
    spelled = {f"{name}.apply"}
    for a in ctx.assignments:
        if a.scope.is_module and "." not in a.target and not a.unpacked and ctx.code_for(a.value) == f"{name}.apply":
            spelled.add(a.target)
    calls = [c for c in ctx.calls if c.dotted in spelled]
    if not calls:
        return None
    uses = sum(names.get(n, 0) for n in spelled)
    if uses != len(calls) + 2 * (len(spelled) - 1):  # the calls, and each alias's target and value
        return None
    return calls


def _callers_cast(ctx: ModuleContext, cls: cst.ClassDef, calls: Optional[List[CallInfo]]) -> bool:
    """A Function around a compiled kernel whose every application in the file hands it an input
    the caller cast by hand: `x.float()` in the call, or `x = x.float()` in the calling function
    before it (also under an `if x.dtype == torch.float16:`, or as the expression `x.float() if
    x.dtype == torch.float16 else x`). The kernel then sees the dtype its author chose, not
    whatever autocast produced. A private Function (`_ROIAlignRotated`) has no other callers; a
    public one may have them elsewhere, so its finding then needs one (`CALLED_ELSEWHERE`)."""
    return calls is not None and all(
        any(_cast_input(ctx, c, a.value) for a in c.node.args if a.keyword is None and not a.star) for c in calls
    )


#: a test module a runner collects (pytest's default `python_files`)
_TEST_FILE = ("test_", "_test.py")


def _entries_only(ctx: ModuleContext, calls: Optional[List[CallInfo]], names: Dict[str, int]) -> bool:
    """The file is a program of its own (a test module a runner collects, a `__main__` script)
    and every application of the Function runs only from its entry points: its top level, a
    runner's `test*` function (or a `test*` method of a `Test*` class) of a test module, or a
    function the file only calls directly from such code (Megatron's `normal_forward`, nested in
    the test that calls it). Then only an autocast the file itself enters, a `conftest.py`
    fixture's or a module importing the file can wrap it (`RUNNER_AUTOCAST`, read whole)."""
    if not calls:
        return False
    base = os.path.basename(ctx.path)
    test_module = base.startswith(_TEST_FILE[0]) or base.endswith(_TEST_FILE[1])
    if not test_module and not _runs_as_script(ctx):
        return False
    return all(_entry_run(ctx, c.scope, test_module, names, 0) for c in calls)


def _entry_run(ctx: ModuleContext, scope: Scope, test_module: bool, names: Dict[str, int], depth: int) -> bool:
    """`scope`'s code runs only from the file's entry points (`_entries_only`)."""
    if scope.is_module:
        return True
    if depth > 4 or not isinstance(scope.node, cst.FunctionDef) or scope.parent is None:
        return False
    name = scope.name
    if test_module and name.startswith("test"):
        if scope.cls is None and scope.parent.is_module:
            return True  # a module-level test function: the runner calls it
        if scope.cls is not None and scope.cls.name.value.startswith("Test") and any(stmt is scope.cls for stmt in ctx.module.body):
            return True  # a test method of a module-level test class
    if scope.cls is not None:
        return False  # a method: called through an instance, from anywhere
    holder = scope.parent
    # the function's name is used only by direct calls, in the scope that defines it (and below)
    callers = [c for c in ctx.calls if c.dotted == name and _within(c.scope, holder)]
    defs = sum(1 for n in subnodes(holder.node) if isinstance(n, cst.FunctionDef) and n.name.value == name)
    uses = names.get(name, 0) if holder.is_module else sum(
        1 for n in subnodes(holder.node) if isinstance(n, cst.Name) and n.value == name
    )
    if not callers or uses != len(callers) + defs:
        return False
    return all(_entry_run(ctx, c.scope, test_module, names, depth + 1) for c in callers if c.scope is not scope)


def _within(scope: Optional[Scope], holder: Scope) -> bool:
    while scope is not None:
        if scope is holder:
            return True
        scope = scope.parent
    return False


def _only_in_backward(ctx: ModuleContext, calls: Optional[List[CallInfo]], functions: List[cst.ClassDef]) -> bool:
    """The Function is applied only inside the `backward` of Functions of this file (the
    double-backward helper `UpFirDn2dBackward`, applied by `UpFirDn2d.backward`): autograd runs
    backward with autocast off, so its forward never sees autocast. Not when that backward is
    decorated `custom_bwd` or opens autocast (it then runs under the forward's autocast state)."""
    if calls is None:
        return False
    for call in calls:
        scope = call.scope
        if scope.name != "backward" or scope.cls is None or scope.cls not in functions or not isinstance(scope.node, cst.FunctionDef):
            return False
        if any(_is_amp_decorator(ctx, d) for d in scope.node.decorators) or _manages_autocast(ctx, scope):
            return False
    return True


def _names(module: cst.Module) -> Iterator[str]:
    """The text of every Name and of every `X.apply` attribute in the module."""
    inside: Set[int] = set()  # the `X` of each `X.apply`, counted with it
    for node in subnodes(module):
        if isinstance(node, cst.Attribute) and node.attr.value == "apply" and isinstance(node.value, cst.Name):
            inside.update((id(node.value), id(node.attr)))
            yield f"{node.value.value}.apply"
        elif isinstance(node, cst.Name) and id(node) not in inside:
            yield node.value


def _cast_input(ctx: ModuleContext, call, arg: cst.BaseExpression) -> bool:
    """`arg` is cast by hand: a cast call itself (`x.contiguous().float()`), or a name the
    calling function rebinds to a cast of it before the call (`x = x.float()`)."""
    if _is_cast(ctx, arg):
        return True
    if isinstance(arg, cst.IfExp) and "dtype" in ctx.code_for(arg.test):
        # cast when the dtype test says so (`x.float() if x.dtype == torch.float16 else x`)
        branches = (arg.body, arg.orelse)
        return any(_is_cast(ctx, b) for b in branches) and all(_is_cast(ctx, b) or isinstance(b, cst.Name) for b in branches)
    if not isinstance(arg, cst.Name):
        return False
    from amplint.model import exclusive

    # a cast in a branch that cannot run with the call (the `if not self.training:` fallback beside
    # the kernel's `else:`) is not what the call is handed
    return any(
        a.order < call.order and _is_cast(ctx, a.value) and not exclusive(a.path, call.path)
        for a in ctx.assignments_to(arg.value, call.scope)
        if a.scope is call.scope and not a.unpacked
    )


def _is_cast(ctx: ModuleContext, expr: cst.BaseExpression) -> bool:
    while isinstance(expr, cst.Call) and isinstance(expr.func, cst.Attribute):
        method = expr.func.attr.value
        if method in _CAST_METHODS or (method in ("to", "type") and _casts(ctx, expr)):
            return True
        expr = expr.func.value
    return False


def _casts_by_hand(ctx: ModuleContext, scope: Scope) -> bool:
    return any(
        call.method in _CAST_METHODS or (call.method in ("to", "type") and _casts(ctx, call.node)) for call in scope.calls
    )


def _is_module_name(ctx: ModuleContext, dotted: Optional[str]) -> bool:
    return bool(dotted) and ctx.imports.is_imported(dotted.split(".")[0])


def _extension_names(ctx: ModuleContext) -> Set[str]:
    """Module-level names bound to compiled extensions."""
    names: Set[str] = set()
    for a in ctx.assignments:
        if a.scope.is_module and isinstance(a.value, cst.Call) and "." not in a.target:
            info = ctx.call_info(a.value)
            if info is None:
                continue
            last = (info.dotted or "").rsplit(".", 1)[-1]
            if info.qualnames & CPP_EXTENSION_LOADERS or last in ("load_ext", "load_extension"):
                names.add(a.target)
    for line in _module_level_lines(ctx.module.body):
        for stmt in line.body:
            if isinstance(stmt, (cst.Import, cst.ImportFrom)) and not isinstance(stmt.names, cst.ImportStar):
                for alias in stmt.names:
                    imported = ctx.code_for(alias.name).rsplit(".", 1)[-1]
                    local = alias.asname.name.value if alias.asname is not None and isinstance(alias.asname.name, cst.Name) else imported
                    if _looks_compiled(imported):
                        names.add(local)
    return names


def _module_level_lines(body) -> Iterator[cst.SimpleStatementLine]:
    """The module's simple statements, also those in its top-level `try:` / `if` blocks
    (`try: from detectron2 import _C` / `except ImportError: ...`), not in functions or classes."""
    for stmt in body:
        if isinstance(stmt, cst.SimpleStatementLine):
            yield stmt
        elif isinstance(stmt, cst.Try):
            for block in (stmt.body, *(h.body for h in stmt.handlers), stmt.orelse and stmt.orelse.body):
                if block is not None:
                    yield from _module_level_lines(getattr(block, "body", ()))
        elif isinstance(stmt, cst.If):
            yield from _module_level_lines(getattr(stmt.body, "body", ()))
            if stmt.orelse is not None:
                orelse = stmt.orelse
                yield from _module_level_lines([orelse] if isinstance(orelse, cst.If) else getattr(orelse.body, "body", ()))


def _looks_compiled(name: str) -> bool:
    return name in ("_C", "_ext", "_cuda", "_kernels") or name.endswith(("_cuda", "_ext", "_C", "_cpp"))


def _extension_call(
    ctx: ModuleContext, scope: Scope, func: cst.FunctionDef, setup_context: bool, extensions: Set[str], least: int,
    integral: Set[str] = frozenset(),
) -> Optional[Tuple[str, int]]:
    """A compiled-kernel call in `func` receiving at least `least` of its tensor parameters
    (not those in `integral`: every application hands them an integer tensor)."""
    params = [p.name.value for p in func.params.params if not _config_default(p.default)]
    if not setup_context and params:
        params = params[1:]  # ctx
    params = [p for p in params if p not in integral]
    if len(params) < least:
        return None
    for call in scope.calls:
        if call.method in _CAST_METHODS or (call.method in ("to", "type") and _casts(ctx, call.node)):
            return None  # the author converts dtypes by hand
    for call in scope.calls:
        dotted = call.dotted or ""
        is_kernel = False
        for q in call.qualnames:
            parts = q.split(".")
            if len(parts) >= 4 and parts[:2] == ["torch", "ops"] and parts[2] not in AUTOCAST_AWARE_OP_NAMESPACES:
                is_kernel = True
        if dotted.split(".")[0] in extensions and "." in dotted:
            is_kernel = True
        if not is_kernel:
            continue
        passed = {a.value.value for a in call.node.args if isinstance(a.value, cst.Name)}
        count = len(passed & set(params))
        if count >= least or least <= 1:
            return dotted, count
    return None


_INTEGER_DTYPES = frozenset(
    f"torch.{d}" for d in ("uint8", "int8", "int16", "short", "int32", "int", "int64", "long", "bool")
)
_INTEGER_CASTS = frozenset({"long", "int", "short", "byte", "char", "bool"})


def _integer_inputs(ctx: ModuleContext, forward: cst.FunctionDef, setup_context: bool, calls: Optional[List[CallInfo]]) -> Set[str]:
    """The forward's parameters that every application of the Function in the file (all of them
    known: `_applications`) hands an integer tensor: a handle or index buffer the kernel reads as
    bytes (TransformerEngine's `_EpCombine` gets `buffer.handle_mem`, which the file only ever
    sets to `torch.empty(n, dtype=torch.uint8)`), not a float input autocast could make fp16."""
    if not calls:
        return set()
    params = [p.name.value for p in forward.params.params]
    if not setup_context:
        params = params[1:]  # ctx
    found: Set[str] = set()
    for i, name in enumerate(params):
        every = True
        for call in calls:
            args = call.node.args
            if any(a.star or a.keyword is not None for a in args[: i + 1]) or len(args) <= i:
                every = False
                break
            if not _integer_tensor(ctx, args[i].value, call.scope):
                every = False
                break
        if every:
            found.add(name)
    return found


def _integer_tensor(ctx: ModuleContext, expr: cst.BaseExpression, scope: Scope, depth: int = 0) -> bool:
    """`expr` is visibly an integer (or bool) tensor: a factory given an integer `dtype=`, an
    integer cast (`.long()`, `.to(torch.int64)`), or a local name or an attribute (`buf.handle`,
    by its attribute name, any receiver) every assignment of the file binds to one."""
    if depth > 3:
        return False
    if isinstance(expr, cst.Call):
        func = expr.func
        if isinstance(func, cst.Attribute) and func.attr.value in _INTEGER_CASTS and not expr.args:
            return True
        dtype = next((a.value for a in expr.args if a.keyword is not None and a.keyword.value == "dtype"), None)
        if dtype is None and isinstance(func, cst.Attribute) and func.attr.value in ("to", "type") and expr.args:
            dtype = expr.args[0].value if expr.args[0].keyword is None else None
        return dtype is not None and bool(ctx.qualnames(dtype) & _INTEGER_DTYPES)
    if isinstance(expr, cst.Attribute):
        attr = expr.attr.value
        found = [a for a in ctx.assignments if a.target.rsplit(".", 1)[-1] == attr and "." in a.target]
    elif isinstance(expr, cst.Name):
        if expr.value in scope.params:
            return False
        found = [a for a in ctx.assignments_to(expr.value, scope) if a.scope is scope]
    else:
        return False
    return bool(found) and all(
        not a.unpacked and isinstance(a.node, cst.Assign) and _integer_tensor(ctx, a.value, a.scope, depth + 1) for a in found
    )


def _rejected_dtypes(ctx: ModuleContext, forward: cst.FunctionDef) -> Dict[str, str]:
    """{parameter: dtype} for the top-level guards of `forward` that raise unless the parameter has
    that dtype (`if not (input.dtype == torch.float32): raise ValueError(...)`, or `!=`):
    pytorch3d's `GatherScatter` takes float32 input and int64 edges only."""
    found: Dict[str, str] = {}
    body = forward.body.body if isinstance(forward.body, cst.IndentedBlock) else ()
    for stmt in body:
        if not isinstance(stmt, cst.If) or stmt.orelse is not None:
            continue
        inner = stmt.body.body if isinstance(stmt.body, cst.IndentedBlock) else ()
        if not (len(inner) == 1 and isinstance(inner[0], cst.SimpleStatementLine) and isinstance(inner[0].body[0], cst.Raise)):
            continue
        test, negated = stmt.test, False
        if isinstance(test, cst.UnaryOperation) and isinstance(test.operator, cst.Not):
            test, negated = test.expression, True
        if not isinstance(test, cst.Comparison) or len(test.comparisons) != 1:
            continue
        op = test.comparisons[0].operator
        if not ((negated and isinstance(op, cst.Equal)) or (not negated and isinstance(op, cst.NotEqual))):
            continue
        left, right = test.left, test.comparisons[0].comparator
        if not (isinstance(left, cst.Attribute) and left.attr.value == "dtype" and isinstance(left.value, cst.Name)):
            continue
        dtype = next(iter(sorted(ctx.qualnames(right))), None)
        if dtype is not None:
            found[left.value.value] = dtype
    return found


def _config_default(default: Optional[cst.BaseExpression]) -> bool:
    """A parameter defaulting to a literal (`stride=1`, `training=False`) is configuration."""
    if default is None:
        return False
    return isinstance(default, (cst.Integer, cst.Float, cst.SimpleString, cst.Name, cst.UnaryOperation, cst.Tuple))


def _builds_in_grad_dtype(ctx: ModuleContext, scope: Scope, backward: cst.FunctionDef) -> bool:
    """`backward` hands the incoming grad's dtype (of it or a view of it) to a call: `w =
    dequantize_fp8(qdata, scale_inv, g.dtype)`, `torch.zeros(n, dtype=grad.dtype)`. What it builds
    for the grad is built in the grad's dtype, as with `w.to(grad.dtype)`; a dtype read from a
    saved input (`x.dtype`) is not the grad's."""
    params = [p.name.value for p in backward.params.params][1:]  # after ctx
    grads = _grad_names(ctx, scope, set(params), [])
    for call in scope.calls:
        for arg in call.node.args:
            value = arg.value
            if (
                isinstance(value, cst.Attribute) and value.attr.value == "dtype"
                and isinstance(value.value, cst.Name) and value.value.value in grads
            ):
                return True
    return False


def _casts(ctx: ModuleContext, call: cst.Call) -> bool:
    for arg in call.args:
        if arg.keyword is not None and arg.keyword.value == "dtype":
            return True
        if ctx.dtype_of(arg.value) is not None:
            return True
        if isinstance(arg.value, cst.Attribute) and "dtype" in arg.value.attr.value:
            return True  # `.to(grad.dtype)`, `.to(ctx.compute_dtype)`
        if isinstance(arg.value, cst.Name) and "dtype" in arg.value.value:
            return True  # `.to(dtype)`, `.to(compute_dtype)`
    return False
