"""AMP001 deprecated-amp-api."""
from __future__ import annotations

import re
from typing import Iterator, List, Optional, Tuple

import libcst as cst

from amplint.model import (
    DEPRECATED_AMP, FLAG_SET, IMPORTER_CALLS, RUNS, DeprecatedApi, Diagnostic, Frame, Invalid, ModuleContext, Path, Reference, Rule, Severity, Valid,
    append_argument_edit, call_is_plain, imported_names, insert_keyword_edits, is_version_test, literal_string,
    make_fix, replace_node, rewrite_with_imports, with_requirement,
)

_VERSION_WORDS = ("hasattr", "__version__", "version", "getattr", "is_torch", "TORCH_")


class DeprecatedAmpApi(Rule):
    """
    ## What it does
    Flags uses of the device-specific AMP API that torch deprecated in 2.4:
    `torch.cuda.amp.autocast`, `torch.cuda.amp.GradScaler`,
    `torch.cuda.amp.custom_fwd` / `custom_bwd`, `torch.cpu.amp.autocast`,
    `torch.cpu.amp.GradScaler`, and the autocast state functions
    `torch.get_autocast_gpu_dtype()`, `torch.get_autocast_cpu_dtype()`,
    `torch.set_autocast_gpu_dtype()`, `torch.is_autocast_cpu_enabled()` and
    their cpu/ipu/xla siblings, through every import and alias form
    (`from torch.cuda.amp import autocast as ac`, `import torch.cuda.amp as amp`,
    `from torch.cuda import amp`, the `autocast_mode` / `grad_scaler` modules),
    and `torch.cuda.amp...` in a file whose `torch` can only come from a star
    import (`from utils.general import *`, no `import torch` of its own).

    ## Why is this bad?
    Every call emits a warning (FutureWarning for the classes and decorators,
    DeprecationWarning for the state functions) and the names are slated for
    removal. The exact texts from torch 2.13 are quoted in the message, e.g.
    `` `torch.cuda.amp.autocast(args...)` is deprecated. Please use
    `torch.amp.autocast('cuda', args...)` instead. `` The device-generic API
    (`torch.amp.autocast(device_type, ...)`, `torch.amp.GradScaler(device, ...)`,
    `torch.amp.custom_fwd(device_type=...)`) is what the deprecated classes
    forward to. `isinstance(s, torch.cuda.amp.GradScaler)` is also False for a
    `torch.amp.GradScaler("cuda")`, so such checks break silently on migration.

    ## Example
    ```python
    from torch.cuda.amp import GradScaler, autocast

    scaler = GradScaler(2.0**14)
    with autocast(False):
        loss = model(x)
    ```

    ## Use instead
    ```python
    import torch

    scaler = torch.amp.GradScaler("cuda", init_scale=2.0**14)
    with torch.amp.autocast("cuda", enabled=False):
        loss = model(x)
    ```

    ## Fix safety
    Safe. The rewrite maps *every* positional argument to its keyword, because
    the positions differ: `torch.cuda.amp.autocast(False)` means
    `enabled=False`, while the second positional of `torch.amp.autocast` is
    `dtype`. `import torch` is added when the file lacks it, and a
    `from torch.cuda.amp import X` whose every use is rewritten is removed.
    The fix honours `torch-version` (the oldest torch the project supports):
    `GradScaler("cuda")` needs torch >= 2.3, `custom_fwd(device_type=)` and the
    `get_autocast_dtype`-style functions >= 2.4; for an older minimum no fix is
    offered. Below 2.3 autocast is rewritten to `torch.autocast(...)`
    (available since 1.10). No fix is offered for bare references
    (`isinstance`, `functools.partial(...)`), `*args`/`**kwargs` calls, or a
    string in a positional slot (`torch.cuda.amp.autocast("cuda")` passes
    `enabled="cuda"`: that needs a human).

    ## Verification
    `amplint --verify` constructs the deprecated object on the installed torch
    and reports the warning it emits.

    ## Notes
    Version-gated fallbacks stay silent: `try: from torch.amp import ...
    except ImportError: from torch.cuda.amp import ...` (the name is ambiguous),
    `hasattr(torch.amp, ...)` / `torch.__version__` if-else branches and the
    code after an early-returning one, `except TypeError:` fallbacks,
    `getattr(torch.amp, "X", torch.cuda.amp.X)`, branches on a probe
    (`get = getattr(torch, "get_autocast_dtype", None)`, then `if get is None:`),
    feature probes in a `try` body, type annotations, and names that are also
    rebound in the file (a class attribute of the same name rebinds it only
    for the class body, not for its methods). A test that only probes for the
    deprecated API itself (`if hasattr(torch.cuda, "amp") and
    hasattr(torch.cuda.amp, "autocast"):`) is no fallback: the deprecated names
    are there on every current torch, so the branch runs (and warns) there.
    Text inside strings and docstrings is never a use.
    `torch.cuda.amp.autocast(device_type=...)` is AMP002 (it raises TypeError).

    A stand-in for a torch without AMP is no fallback of the API generation:
    `try: from torch.cuda.amp import GradScaler` (or `autocast =
    torch.cuda.amp.autocast`) with an `except:` that defines a dummy class of
    the same name (RAFT's "dummy GradScaler for PyTorch < 1.6") binds the
    deprecated class on every torch that still has it, so the file's calls
    warn. It is reported once, at the import (or the alias), without a fix,
    when every other binding of the name is in the handlers, the handlers
    name no `torch`, and the file calls the name; a name the `try` only
    probes (never called) stays silent. A module that only re-exports the
    names (GLIP's `utils/amp.py`: `try: from torch.cuda.amp import autocast,
    GradScaler, custom_fwd` with `except: autocast = nullcontext`, at its
    top level) is reported at that import when a project file imports the
    name from it (`from maskrcnn_benchmark.utils.amp import GradScaler`)
    and calls it (`GradScaler()`, `@custom_fwd(...)`); linted alone, or
    with no such importer, it stays silent.

    On an Ascend NPU branch (`if self.on_npu:`, `if is_npu_available():`, a
    test naming the NPU) of a file that imports
    `torch_npu.contrib.transfer_to_npu`, `torch.cuda.amp.autocast` is
    torch_npu's own NPU autocast: that import replaces `torch.cuda` with the
    NPU's, and without torch_npu the branch does not run. The same call
    outside such a branch, or in a file without the import, is reported.

    Code that runs only while a private flag attribute of the class is on
    (`torch.cuda.amp.autocast if self._peft_has_been_casted_to_bf16 else
    nullcontext`, an `if self._flag:` body, the `else` of `if not self._flag:`)
    is not reported when the file only ever assigns that flag a false constant
    (`False`, `None`, `0`), spells it only as `self.<flag>`, and no other file
    of the project names it (no subclass, `setattr` or keyword can turn it on):
    the deprecated class is never constructed, so it never warns (LLaVA-NeXT's
    trimmed copy of trl's DPOTrainer). A public flag, or one set anywhere, keeps
    the finding.

    A deprecated call warns only when it runs: code no program of the project
    runs is not reported (`embedded.never_runs`). That is a module outside
    any package and below the project root that only defines, which nothing
    imports, names or launches (documentation loading it by name counts:
    `custom_pipeline="clip_guided_images_mixing_stable_diffusion"` in
    diffusers' community README; prose naming it does not; files that do
    so and are themselves never loaded do not count: x-flux's copy of
    ZoeDepth's `trainers/`, whose
    trainers import its `loss.py`, and nothing imports them), and a
    definition of such a module that is a script when its `__main__` block
    does not name it (`loss.py`'s block tests another loss). A file some
    program imports, a package module, a root module, a launched script, a
    test file (`test*.py`, `*_test.py`: a test runner collects it) and a
    module of a folder without `__init__.py` inside a package the project's
    packaging distributes (a namespace subpackage its users import) keep
    every finding.

    A device dispatch is no fallback: `from torch.cuda.amp import GradScaler`
    in the `else` of `if npu: from torch.npu.amp import GradScaler elif mlu:
    ...` runs on every CUDA machine, whatever the torch version. It is
    reported once, at that import, without a fix (the other branches bind the
    same name); uses of the name stay silent, as for any ambiguous name.

    ## References
    - amplint's evidence page: `amplint --explain AMP001` (docs/evidence.md#amp001)
    - https://pytorch.org/docs/stable/amp.html
    - pytorch/pytorch#126527 (deprecation of the device-specific GradScaler and custom_fwd)
    """

    code = "AMP001"
    name = "deprecated-amp-api"
    severity = Severity.WARNING
    message = "deprecated device-specific AMP API"
    triggers = (
        "cuda.amp",
        "cpu.amp",
        "import amp",
        "autocast_gpu_",
        "autocast_cpu_",
        "autocast_ipu_",
        "autocast_xla_",
    )

    VALID = [
        Valid(
            """
from contextlib import nullcontext

import torch


class DPOTrainer:
    def __init__(self, model):
        self.model = model
        self._peft_has_been_casted_to_bf16 = False

    def reference_logps(self, batch):
        manager = torch.cuda.amp.autocast if self._peft_has_been_casted_to_bf16 else nullcontext
        with manager():
            return self.model(batch)

    def generate(self, batch):
        if self._peft_has_been_casted_to_bf16:
            with torch.cuda.amp.autocast():
                return self.model.generate(batch)
        return self.model.generate(batch)
""",
            "the blind drill (LLaVA-NeXT's trimmed trl DPOTrainer): the branch needs a private flag the"
            " file only turns off, and no other file of the project names it",
        ),
        Valid(
            """
import torch


def ipex_hijacks(shim):
    torch.get_autocast_gpu_dtype = shim
    torch.cuda.amp.GradScaler = shim
""",
            "replacing a deprecated name (a monkeypatch) is no use of it",
        ),
        Valid(
            """
import torch
scaler = torch.amp.GradScaler("cuda")
with torch.autocast("cuda", dtype=torch.float16):
    loss = model(x)
""",
            "the current API",
        ),
        Valid(
            """
try:
    from torch.amp import GradScaler, autocast
except ImportError:
    from torch.cuda.amp import GradScaler, autocast
scaler = GradScaler()
with autocast():
    loss = model(x)
""",
            "try/except ImportError fallback: the names are ambiguous",
        ),
        Valid(
            """
import torch
if hasattr(torch.amp, "GradScaler"):
    scaler = torch.amp.GradScaler("cuda")
else:
    scaler = torch.cuda.amp.GradScaler()
""",
            "hasattr guard",
        ),
        Valid(
            """
import torch
from packaging import version
if version.parse(torch.__version__) >= version.parse("2.4"):
    from torch.amp import custom_fwd
    fwd = custom_fwd(device_type="cuda")
else:
    fwd = torch.cuda.amp.custom_fwd
""",
            "torch.__version__ check",
        ),
        Valid(
            '''
"""Training utilities.

Replaces torch.cuda.amp.autocast() and torch.cuda.amp.GradScaler.
"""
import torch
HELP = "use torch.cuda.amp.autocast(enabled=True) on old torch"
''',
            "text inside docstrings and strings",
        ),
        Valid(
            """
import torch
autocast_cls = getattr(torch.amp, "autocast", torch.cuda.amp.autocast)
amp_ctx = torch.amp.autocast if hasattr(torch, "amp") else torch.cuda.amp.autocast
""",
            "getattr default and hasattr conditional expression",
        ),
        Valid(
            """
import torch
from torch.amp import custom_fwd as _custom_fwd
try:
    custom_fwd = functools.partial(_custom_fwd, device_type="cuda")
except AttributeError:
    from torch.cuda.amp import custom_fwd

@custom_fwd
def forward(ctx, x):
    return x
""",
            "a name rebound by assignment is ambiguous",
        ),
        Valid(
            """
import torch
def autocast_dtype(device_type):
    if hasattr(torch, "get_autocast_dtype"):
        return torch.get_autocast_dtype(device_type)
    # torch < 2.4 only has the per-device getters
    if device_type == "cuda":
        return torch.get_autocast_gpu_dtype()
    return torch.get_autocast_cpu_dtype()
""",
            "fallback after an early-returning hasattr check",
        ),
        Valid(
            """
import torch
def cuda_autocast_dtype():
    get_dtype = getattr(torch, "get_autocast_dtype", None)
    return get_dtype("cuda") if get_dtype is not None else torch.get_autocast_gpu_dtype()
""",
            "fallback when a getattr probe found no new API (`probe is not None`)",
        ),
        Valid(
            """
import torch
def is_autocast_enabled(device="cuda"):
    try:
        return torch.is_autocast_enabled(device)
    except TypeError:
        if device == "cpu":
            return torch.is_autocast_cpu_enabled()
        return torch.is_autocast_enabled()
""",
            "fallback in `except TypeError` (old torch rejects the device argument)",
        ),
        Valid(
            """
import torch
def cpu_amp_available():
    try:
        _ = torch.cpu.amp.autocast
    except AttributeError:
        return False
    return True
""",
            "feature probe in a try body",
        ),
        Valid(
            """
from torch.cuda.amp import GradScaler
def save_state(output_dir: str, scaler: GradScaler = None) -> None:
    ...
""",
            "a type annotation constructs nothing",
        ),
        Valid(
            """
from apex import amp
model, optimizer = amp.initialize(model, optimizer)
with amp.scale_loss(loss, optimizer) as scaled:
    scaled.backward()
""",
            "apex.amp is not torch",
        ),
        Valid(
            """
import torch

if is_torch_npu_available():
    from torch.npu.amp import GradScaler
elif hasattr(torch, "amp") and hasattr(torch.amp, "GradScaler"):
    from torch.amp import GradScaler
else:
    from torch.cuda.amp import GradScaler

scaler = GradScaler()
""",
            "a device dispatch whose CUDA fallback is version-gated (hasattr) stays silent",
        ),
        Valid(
            """
if is_npu_available():
    from torch.npu.amp import GradScaler
else:
    from torch.amp import GradScaler

scaler = GradScaler()
""",
            "a device dispatch whose CUDA branch already uses torch.amp",
        ),
        Valid(
            """
import torch
if hasattr(torch.cuda.amp, "GradScaler") and not hasattr(torch.amp, "GradScaler"):
    scaler = torch.cuda.amp.GradScaler()
else:
    scaler = torch.amp.GradScaler("cuda")
""",
            "a test that also probes for the new API picks the old-torch branch",
        ),
        Valid(
            """
import torch
try:
    import torch_npu
    from torch_npu.contrib import transfer_to_npu
    npu_is_available = True
except ImportError:
    npu_is_available = False


class NpuConfig:
    def __init__(self):
        self.on_npu = npu_is_available

    def run_fp32(self, op, x):
        if self.on_npu:
            with torch.cuda.amp.autocast(enabled=False):
                return op(x.float())
        return op(x)
""",
            "an NPU-only branch in a file whose transfer_to_npu remaps torch.cuda.amp to torch_npu's autocast",
        ),
        Valid(
            """
try:
    from torch.cuda.amp import autocast
    HAS_NATIVE_AMP = True
except ImportError:
    HAS_NATIVE_AMP = False
""",
            "a deprecated name imported in a try only to probe for native AMP, never called",
        ),
        Valid(
            """
import contextlib
try:
    from torch.cuda.amp import autocast
except ImportError:
    class autocast:
        def __init__(self, enabled=True):
            pass
        def __enter__(self):
            pass
        def __exit__(self, *args):
            pass
if not USE_AMP:
    autocast = contextlib.nullcontext

def forward(model, x):
    with autocast():
        return model(x)
""",
            "the stand-in's name is rebound outside the handler too: what it is at the call is not known",
        ),
        Valid(
            """
import torch
try:
    from torch.amp import GradScaler
except ImportError:
    class GradScaler:
        def __init__(self, *args, **kwargs):
            pass

scaler = GradScaler("cuda")
""",
            "a stand-in beside the current API",
        ),
        Valid(
            """
try:
    # If PyTorch version >= 1.6.0, torch.cuda.amp.GradScaler would be imported
    from torch.cuda.amp import GradScaler
except ImportError:
    pass

if digit_version(TORCH_VERSION) >= digit_version("1.6.0"):
    class Fp16OptimizerHook:
        def before_run(self, runner):
            self.loss_scaler = GradScaler()
""",
            "mmcv's hook: the handler defines no stand-in and the class using the name is version-gated",
        ),
        Valid(
            """
from contextlib import contextmanager

@contextmanager
def nullcontext(enter_result=None, **kwargs):
    yield enter_result

try:
    from torch.cuda.amp import autocast, GradScaler
except:
    GradScaler = nullcontext
    autocast = nullcontext
""",
            "a stand-in module that only re-exports the names, with no project file importing and calling them",
        ),
    ]

    INVALID = [
        Invalid(
            """
from contextlib import nullcontext

import torch


class DPOTrainer:
    def __init__(self, model, peft_bf16):
        self.model = model
        self._peft_has_been_casted_to_bf16 = False
        if peft_bf16:
            self._peft_has_been_casted_to_bf16 = True

    def reference_logps(self, batch):
        manager = torch.cuda.amp.autocast if self._peft_has_been_casted_to_bf16 else nullcontext
        with manager():
            return self.model(batch)
""",
            line=14,
            why="the flag is turned on too: the branch runs",
        ),
        Invalid(
            """
import torch
try:
    from torch_npu.contrib import transfer_to_npu
    on_npu = True
except ImportError:
    on_npu = False


def run_fp32(op, x):
    if not on_npu:
        with torch.cuda.amp.autocast(enabled=False):
            return op(x.float())
    return op(x)
""",
            line=11,
            why="the branch runs where torch_npu is missing: torch's deprecated CUDA autocast",
        ),
        Invalid(
            """
import torch


def run_fp32(config, op, x):
    if config.on_npu:
        with torch.cuda.amp.autocast(enabled=False):
            return op(x.float())
    return op(x)
""",
            line=6,
            why="an NPU branch, but nothing remaps torch.cuda: the deprecated class itself",
        ),
        Invalid(
            """
import contextlib
import functools
import torch

if torch.cuda.is_available() and hasattr(torch.cuda, "amp") and hasattr(torch.cuda.amp, "autocast"):
    autocast = functools.partial(torch.cuda.amp.autocast, dtype=torch.bfloat16)
else:
    @contextlib.contextmanager
    def autocast():
        yield
""",
            line=6,
            why="probing for the deprecated API itself picks no torch version: it is there on every current torch",
        ),
        Invalid(
            """
import torch


class ImageLogger:
    def log_img(self, pl_module, batch):
        if hasattr(pl_module, "log_images") and callable(pl_module.log_images):
            kwargs = {"dtype": torch.get_autocast_gpu_dtype()}
            with torch.no_grad(), torch.cuda.amp.autocast(**kwargs):
                images = pl_module.log_images(batch)
""",
            line=7,
            count=2,
            why="a hasattr probe of the user's own module is not a version fallback",
        ),
        Invalid(
            """
import torch


def train(loader, vae, config):
    load_vae_feat = getattr(loader.dataset, "load_vae_feat", False)
    for batch in loader:
        if load_vae_feat:
            z = batch[0]
        else:
            with torch.no_grad(), torch.cuda.amp.autocast(enabled=config.fp16):
                z = vae.encode(batch[0])
""",
            line=10,
            why="a flag read with getattr from the user's dataset picks a data path, not an API generation",
        ),
        Invalid(
            """
from utils.general import *


def train_one_epoch(model, loader, optimizer):
    scaler = torch.cuda.amp.GradScaler()
    for x, y in loader:
        with torch.cuda.amp.autocast():
            loss = model(x, y)
""",
            line=5,
            count=2,
            why="`torch` comes in through the star import (the file binds it nowhere else)",
        ),
        Invalid(
            """
import torch

from .utils import is_mlu_available, is_npu_available

if is_npu_available():
    from torch.npu.amp import GradScaler
elif is_mlu_available():
    from torch.mlu.amp import GradScaler
else:
    from torch.cuda.amp import GradScaler


def build_scaler(enabled):
    return GradScaler(enabled=enabled)
""",
            line=10,
            count=1,
            why="a device dispatch is not a version fallback: the CUDA branch warns on every CUDA run (reported at the import, once)",
        ),
        Invalid(
            """
import torch
scaler = torch.cuda.amp.GradScaler()
with torch.cuda.amp.autocast(False):
    loss = model(x)
""",
            line=2,
            count=2,
            fixed="""
import torch
scaler = torch.amp.GradScaler("cuda")
with torch.amp.autocast("cuda", enabled=False):
    loss = model(x)
""",
        ),
        Invalid(
            """
from torch.cuda.amp import GradScaler, autocast

class Trainer:
    def __init__(self, model, optimizer):
        self.model = model
        self.optimizer = optimizer
        self.scaler = GradScaler(2.0**14, enabled=True)

    def training_step(self, x, y):
        with autocast(True, torch.bfloat16):
            loss = self.model(x, y)
        self.scaler.scale(loss).backward()
        self.scaler.step(self.optimizer)
        self.scaler.update()
""",
            line=7,
            count=2,
            fixed="""
import torch

class Trainer:
    def __init__(self, model, optimizer):
        self.model = model
        self.optimizer = optimizer
        self.scaler = torch.amp.GradScaler("cuda", init_scale=2.0**14, enabled=True)

    def training_step(self, x, y):
        with torch.amp.autocast("cuda", enabled=True, dtype=torch.bfloat16):
            loss = self.model(x, y)
        self.scaler.scale(loss).backward()
        self.scaler.step(self.optimizer)
        self.scaler.update()
""",
        ),
        Invalid(
            """
import torch
from torch.cuda.amp import custom_bwd, custom_fwd

class ScaledMatmul(torch.autograd.Function):
    @staticmethod
    @custom_fwd(cast_inputs=torch.float32)
    def forward(ctx, a, b):
        ctx.save_for_backward(a, b)
        return a @ b

    @staticmethod
    @custom_bwd
    def backward(ctx, grad):
        a, b = ctx.saved_tensors
        return grad @ b.t(), a.t() @ grad
""",
            line=6,
            count=2,
            fixed="""
import torch

class ScaledMatmul(torch.autograd.Function):
    @staticmethod
    @torch.amp.custom_fwd(cast_inputs=torch.float32, device_type="cuda")
    def forward(ctx, a, b):
        ctx.save_for_backward(a, b)
        return a @ b

    @staticmethod
    @torch.amp.custom_bwd(device_type="cuda")
    def backward(ctx, grad):
        a, b = ctx.saved_tensors
        return grad @ b.t(), a.t() @ grad
""",
        ),
        Invalid(
            """
import torch.cuda.amp as amp
for step, (x, y) in enumerate(loader):
    with amp.autocast(enabled=use_amp):
        loss = model(x, y)
    if use_amp:
        scaler.scale(loss).backward()
    else:
        loss.backward()
""",
            line=3,
            fixed="""
import torch
for step, (x, y) in enumerate(loader):
    with torch.amp.autocast("cuda", enabled=use_amp):
        loss = model(x, y)
    if use_amp:
        scaler.scale(loss).backward()
    else:
        loss.backward()
""",
        ),
        Invalid(
            """
import torch
from torch.cpu import amp as cpu_amp
with cpu_amp.autocast(dtype=torch.bfloat16):
    out = model(x)
dtype = torch.get_autocast_gpu_dtype()
""",
            line=3,
            count=2,
            fixed="""
import torch
with torch.amp.autocast("cpu", dtype=torch.bfloat16):
    out = model(x)
dtype = torch.get_autocast_dtype("cuda")
""",
        ),
        Invalid(
            """
import torch
from packaging import version

def build_scaler(enabled):
    if version.parse(torch.__version__) < version.parse("1.6"):
        raise ImportError("native AMP needs torch >= 1.6")
    return torch.cuda.amp.GradScaler(enabled=enabled)
""",
            line=7,
            fixed="""
import torch
from packaging import version

def build_scaler(enabled):
    if version.parse(torch.__version__) < version.parse("1.6"):
        raise ImportError("native AMP needs torch >= 1.6")
    return torch.amp.GradScaler("cuda", enabled=enabled)
""",
            why="a version check that raises guards the main path; the code after it is not a fallback",
        ),
        Invalid(
            """
try:
    from torch.cuda.amp import GradScaler
except:
    # dummy GradScaler for PyTorch < 1.6
    class GradScaler:
        def __init__(self, enabled=False):
            pass
        def scale(self, loss):
            return loss
        def step(self, optimizer):
            optimizer.step()
        def update(self):
            pass


def train(model, optimizer, args):
    scaler = GradScaler(enabled=args.mixed_precision)
""",
            line=2,
            why="a stand-in for a torch without AMP: on every torch that has the deprecated class the import succeeds"
            " and the file builds it (reported at the import, once)",
        ),
        Invalid(
            """
import torch
try:
    autocast = torch.cuda.amp.autocast
except:
    # dummy autocast for PyTorch < 1.6
    class autocast:
        def __init__(self, enabled):
            pass
        def __enter__(self):
            pass
        def __exit__(self, *args):
            pass


class Net(torch.nn.Module):
    def forward(self, x):
        with autocast(enabled=self.mixed_precision):
            return self.body(x)
""",
            line=3,
            why="an alias bound in the try and used by the file is no feature probe: the stand-in runs only on old torch",
        ),
        Invalid(
            """
import torch
def check(scaler):
    assert isinstance(scaler, torch.cuda.amp.GradScaler)
""",
            line=3,
            why="a bare reference: flagged, no fix (isinstance is False for torch.amp.GradScaler('cuda'))",
        ),
    ]

    def check(self, ctx: ModuleContext) -> Iterator[Diagnostic]:
        flagged = []
        for ref in ctx.references():
            api = _deprecated(ctx, ref)
            if api is not None:
                flagged.append((ref, api))
        refs = [r for r, _ in flagged]
        for ref, api in flagged:
            fix = None
            edits = rewrite_with_imports(ctx, self.code, ref, refs, lambda r, p: _rewrite(ctx, r, p))
            if edits is not None:
                fix = make_fix(f"Use `torch.{api.new}` ({api.device!r}){_needs(ctx, api.min_torch)}", edits, safe=True)
            flag = _off_flag(ctx, ref)
            runs = _runs_condition(ctx, ref.node)
            yield ctx.diagnostic(
                self, ref.node, _message(ctx, ref, api), fix=fix, data=_data(ctx, ref, api), help=_help(ref, api),
                condition=with_requirement(f"{FLAG_SET}={flag}", *runs.split("=", 1)) if flag is not None else runs,
            )
        for alias, api, called in _stand_in_imports(ctx):
            runs = _runs_condition(ctx, alias)
            local = ctx.code_for(alias.asname.name) if alias.asname is not None else ctx.code_for(alias.name)
            yield ctx.diagnostic(
                self, alias, f"`{ctx.code_for(alias.name)}` (`{api.old}`) is deprecated", data=_dispatch_data(ctx, alias, api),
                help=_help_for(api), condition=runs if called else with_requirement(runs, IMPORTER_CALLS, local),
            )
        for alias, api, others in _device_dispatch_imports(ctx):
            yield ctx.diagnostic(
                self, alias, _dispatch_message(ctx, alias, api, others), data=_dispatch_data(ctx, alias, api),
                help=f'Use `torch.{api.new}("{api.device}", ...)`',
            )


def _runs_condition(ctx: ModuleContext, node: cst.CSTNode) -> str:
    """`runs=<definition>`: the deprecated call warns only when it runs, so the finding needs
    some program of the project to run the module-level `def`/`class` whose function body holds
    it (`runs` alone for code that runs when the module is loaded: the top level, a class body,
    a decorator, a default)."""
    in_body = False
    child, parent = node, ctx.parent(node)
    while parent is not None and not isinstance(parent, cst.Module):
        if isinstance(parent, cst.FunctionDef) and child is parent.body:
            in_body = True
        child, parent = parent, ctx.parent(parent)
    if in_body and isinstance(child, (cst.FunctionDef, cst.ClassDef)):
        return f"{RUNS}={child.name.value}"
    return RUNS


def _off_flag(ctx: ModuleContext, ref: Reference) -> Optional[str]:
    """The private flag attribute (`self._peft_has_been_casted_to_bf16`) whose truth selects the
    code `ref` is in (an `if`/`elif` body or a conditional expression's value, or the `else` of
    `not flag`), when the file only ever assigns it a false constant (`False`, `None`, `0`) and
    spells it nowhere else but as `self.<flag>`: the branch runs only if another file sets it
    (the condition `flag-set=<flag>`). LLaVA-NeXT's trimmed copy of trl's DPOTrainer."""
    tests: List[Tuple[cst.BaseExpression, bool]] = []
    child: cst.CSTNode = ref.node
    parent = ctx.parent(child)
    while parent is not None and not isinstance(parent, (cst.BaseSmallStatement, cst.BaseCompoundStatement)):
        if isinstance(parent, cst.IfExp) and child is not parent.test:
            tests.append((parent.test, child is parent.body))
        child, parent = parent, ctx.parent(parent)
    tests.extend((f.test, f.kind == "if") for f in ref.path if f.kind in ("if", "else") and f.test is not None)
    for test, taken_if_true in tests:
        negated = isinstance(test, cst.UnaryOperation) and isinstance(test.operator, cst.Not)
        inner = test.expression if negated else test
        if negated == taken_if_true:
            continue  # the branch runs while the flag is off
        if not (isinstance(inner, cst.Attribute) and isinstance(inner.value, cst.Name) and inner.value.value == "self"):
            continue
        name = inner.attr.value
        if name.startswith("_") and not name.startswith("__") and _only_turned_off(ctx, name):
            return name
    return None


def _only_turned_off(ctx: ModuleContext, name: str) -> bool:
    found = ctx.assignments_to(f"self.{name}")
    if not found or any(a.unpacked or not isinstance(a.node, (cst.Assign, cst.AnnAssign)) for a in found):
        return False
    off = lambda v: (isinstance(v, cst.Name) and v.value in ("False", "None")) or (isinstance(v, cst.Integer) and v.value == "0")  # noqa: E731
    if not all(off(a.value) for a in found):
        return False
    text = ctx.module.code
    return len(re.findall(rf"\b{re.escape(name)}\b", text)) == len(re.findall(rf"\bself\.{re.escape(name)}\b", text))


def _deprecated(ctx: ModuleContext, ref: Reference) -> Optional[DeprecatedApi]:
    """The deprecated API `ref` certainly refers to, outside version gates."""
    apis = {DEPRECATED_AMP.get(q) for q in ref.qualnames}
    if None in apis or len({a.old for a in apis}) != 1:
        return None  # not deprecated, or ambiguous (a try/except ImportError fallback)
    api = DEPRECATED_AMP[min(ref.qualnames)]  # the same `old` either way; min keeps the pick fixed
    if ref.annotation or ctx.is_rebound(ref.root) or _gated(ctx, ref):
        return None
    if api.kind == "autocast" and ref.call is not None and any(
        a.keyword is not None and a.keyword.value == "device_type" for a in ref.call.args
    ):
        return None  # TypeError: AMP002
    return api


def _gated(ctx: ModuleContext, ref: Reference) -> bool:
    """Code that runs only on a torch without the new API (or probes for it)."""
    return _gated_at(ctx, ref.path, ref.node, ref.use == "bare")


def _gated_at(ctx: ModuleContext, path: Path, node: cst.CSTNode, bare: bool) -> bool:
    if ctx.is_version_gated(tuple(f for f in path if not _deprecated_api_present(ctx, f))):
        return True
    for frame in path:
        # `try: torch.is_autocast_enabled(device) except TypeError: <old per-device API>`
        if frame.kind == "except" and frame.test is not None and "TypeError" in ctx.code_for(frame.test):
            return True
        # `try: torch.cpu.amp.autocast except AttributeError: ...`: a feature probe (not the
        # binding a stand-in fallback replaces on old torch: `autocast = torch.cuda.amp.autocast`)
        if frame.kind == "try" and bare and _catches_import_errors(frame.node) and not _stand_in_binding(
            ctx, frame.node, node
        ):
            return True
    if _after_version_return(ctx, node):
        return True
    if _npu_branch(path) and _remaps_cuda_to_npu(ctx):
        return True
    # `if use_new_amp:` where `use_new_amp = hasattr(torch.amp, ...)` / a version check, or
    # `get(...) if get is not None else <old API>` where `get = getattr(torch, "get_autocast_dtype", None)`
    for frame in path:
        if frame.kind in ("if", "else") and frame.test is not None:
            test = _tested_name(frame.test)
            if test is not None:
                for a in ctx.assignments_to(test.value):
                    # a probe of torch or an AMP name; `getattr(dataset, "load_vae_feat", False)` is none
                    if is_version_test(ctx.code_for(a.value)):
                        return True
    return False


#: torch_npu's import that replaces `torch.cuda` (its `amp` included) with the NPU's, process-wide
_NPU_REMAP = "torch_npu.contrib.transfer_to_npu"
_NPU_WORD = re.compile(r"npu", re.IGNORECASE)
_NEGATIONS = re.compile(r"\bnot\b|!=|\bis\s+None\b")


def _npu_branch(path: Path) -> bool:
    """The code runs only on an Ascend NPU: under `if self.on_npu:` / `if is_npu_available():` /
    `if device.type == "npu":` (a test naming the NPU, negated nowhere), or in the `else` of
    `if not on_npu:`."""
    for frame in path:
        test = frame.test
        if test is None or frame.kind not in ("if", "else"):
            continue
        negated = isinstance(test, cst.UnaryOperation) and isinstance(test.operator, cst.Not)
        inner = test.expression if negated else test
        text = cst.Module([]).code_for_node(inner)
        if not _NPU_WORD.search(text) or _NEGATIONS.search(text):
            continue
        if (frame.kind == "if") != negated:
            return True
    return False


def _remaps_cuda_to_npu(ctx: ModuleContext) -> bool:
    """The file imports `torch_npu.contrib.transfer_to_npu` (in any form): on a machine with
    torch_npu, `torch.cuda.amp.autocast` then is torch_npu's NPU autocast, not torch's
    deprecated CUDA class."""
    for node in _imports_anywhere(ctx.module):
        if isinstance(node, cst.Import):
            if any(ctx.code_for(a.name) == _NPU_REMAP for a in node.names):
                return True
        elif node.module is not None and not node.relative and isinstance(node.names, tuple):
            module = ctx.code_for(node.module)
            if any(f"{module}.{ctx.code_for(a.name)}" == _NPU_REMAP for a in node.names) or module == _NPU_REMAP:
                return True
    return False


def _imports_anywhere(module: cst.Module) -> List[cst.CSTNode]:
    import libcst.matchers as m

    return list(m.findall(module, m.Import() | m.ImportFrom()))


#: the modules of the deprecated API (`torch.cuda.amp`, `torch.cpu.amp.autocast_mode`, ...): probing one
#: for presence asks whether the deprecated API is there, not whether the new one is
_DEPRECATED_MODULES = frozenset(
    m for old in DEPRECATED_AMP for m in (old.rsplit(".", k)[0] for k in (1, 2)) if ".amp" in m
)


def _deprecated_api_present(ctx: ModuleContext, frame: Frame) -> bool:
    """The branch runs when the deprecated API exists, i.e. on every torch that still has it:
    `if hasattr(torch.cuda, "amp") and hasattr(torch.cuda.amp, "autocast") and cuda_ok:` (each
    probe asks for a deprecated name, none for the device-generic one, and nothing else in the
    test is a version check), or the `else` of `if not hasattr(torch.cuda.amp, "autocast"):`.
    Such a test picks no API generation, so the code under it is no fallback."""
    test = frame.test
    if test is None:
        return False
    negated = isinstance(test, cst.UnaryOperation) and isinstance(test.operator, cst.Not)
    if frame.kind == "else" and negated:
        operands: List[cst.BaseExpression] = [test.expression]
    elif frame.kind == "if" and not negated:
        operands = []
        stack: List[cst.BaseExpression] = [test]
        while stack:
            part = stack.pop()
            if isinstance(part, cst.BooleanOperation) and isinstance(part.operator, cst.And):
                stack.extend((part.right, part.left))
            else:
                operands.append(part)
    else:
        return False
    probes = 0
    for part in operands:
        probed = _probed_name(ctx, part)
        if probed is None:
            if "hasattr" in ctx.code_for(part) or "getattr" in ctx.code_for(part) or ctx.is_version_gated(
                (Frame("if", frame.node, part),)
            ):
                return False  # a probe of something else, or a version check
            continue
        if probed not in DEPRECATED_AMP and probed not in _DEPRECATED_MODULES:
            return False
        probes += 1
    return probes > 0


def _probed_name(ctx: ModuleContext, node: cst.BaseExpression) -> Optional[str]:
    """The qualified name `hasattr(obj, "name")` asks for (`torch.cuda.amp.autocast`), or None."""
    if not (isinstance(node, cst.Call) and isinstance(node.func, cst.Name) and node.func.value == "hasattr"):
        return None
    if len(node.args) != 2 or any(a.keyword is not None or a.star for a in node.args):
        return None
    attr = literal_string(node.args[1].value)
    owner = ctx.imports.qualnames(node.args[0].value)
    if attr is None or len(owner) != 1:
        return None
    return f"{next(iter(owner))}.{attr}"


def _tested_name(test: cst.BaseExpression) -> Optional[cst.Name]:
    """The name a branch tests: `x`, `not x`, `x is None`, `x is not None`."""
    if isinstance(test, cst.UnaryOperation) and isinstance(test.operator, cst.Not):
        test = test.expression
    if isinstance(test, cst.Comparison) and len(test.comparisons) == 1:
        target = test.comparisons[0]
        if isinstance(target.operator, (cst.Is, cst.IsNot)) and isinstance(target.comparator, cst.Name) and (
            target.comparator.value == "None"
        ):
            test = test.left
    return test if isinstance(test, cst.Name) else None


def _device_dispatch_imports(ctx: ModuleContext) -> Iterator[Tuple[cst.ImportAlias, DeprecatedApi, List[str]]]:
    """`from torch.cuda.amp import GradScaler` in one branch of a device dispatch (`if npu: from
    torch.npu.amp import GradScaler elif mlu: ... else: <it>`): the name is ambiguous, so its uses
    are left alone, but the CUDA branch is no version fallback and warns on every CUDA run. Only
    when every other binding of the name is another device's AMP module and the import sits
    under an `if` that is no version check, outside any `try`."""
    for node, path in _imports_with_paths(ctx.module):
        if not isinstance(node.names, tuple) or node.relative or node.module is None:
            continue
        if not path:
            continue
        module = ctx.code_for(node.module)
        for alias in node.names:
            name = ctx.code_for(alias.name)
            local = ctx.code_for(alias.asname.name) if alias.asname is not None else name
            api = DEPRECATED_AMP.get(f"{module}.{name}")
            targets = ctx.imports.resolve_dotted(local)
            others = sorted(t for t in targets if t != api.old) if api is not None else []
            if api is None or not others or not all(_other_device(t, name) for t in others):
                continue
            if _gated_at(ctx, path, node, False) or ctx.is_rebound(local):
                continue
            yield alias, api, others


def _stand_in_imports(ctx: ModuleContext) -> Iterator[Tuple[cst.ImportAlias, DeprecatedApi, bool]]:
    """`try: from torch.cuda.amp import GradScaler` whose `except` defines a stand-in of the same
    name (`class GradScaler: ...`, a dummy for a torch without AMP): the name is rebound, so its
    uses are left alone, but on every torch that has the deprecated class the `try` succeeds and
    the file constructs it. Only when every other binding of the name is in the handlers, the
    handlers name no `torch` (a stand-in, not another API generation), the file calls the name
    outside them (True), or else it is a top-level import another file may import and call
    (False: the finding then needs `importer-calls`), and the `try` is no version fallback itself."""
    import libcst.matchers as m

    if "try" not in ctx.module.code:
        return
    for node in m.findall(ctx.module, m.Try()):
        assert isinstance(node, cst.Try)
        if not _stand_in_try(ctx, node):
            continue
        for stmt in node.body.body:
            if not isinstance(stmt, cst.SimpleStatementLine):
                continue
            for small in stmt.body:
                if not isinstance(small, cst.ImportFrom) or small.relative or small.module is None:
                    continue
                if not isinstance(small.names, tuple):
                    continue
                module = ctx.code_for(small.module)
                for alias in small.names:
                    name = ctx.code_for(alias.name)
                    local = ctx.code_for(alias.asname.name) if alias.asname is not None else name
                    api = DEPRECATED_AMP.get(f"{module}.{name}")
                    if api is None or ctx.imports.resolve_dotted(local) != {api.old}:
                        continue
                    if _bound_outside(ctx, local, node) or not _binds_in_handlers(ctx, local, node):
                        continue
                    if _called_outside(ctx, local, node):
                        yield alias, api, True
                    elif _at_module_level(ctx, node):
                        yield alias, api, False


def _at_module_level(ctx: ModuleContext, node: cst.CSTNode) -> bool:
    """`node` is a statement of the module itself (a name it binds is importable from it)."""
    return isinstance(ctx.parent(node), cst.Module)


def _stand_in_try(ctx: ModuleContext, node: cst.Try) -> bool:
    """A `try` whose handlers catch the missing API (`except ImportError`, `AttributeError`, a bare
    `except:`) and name no `torch` at all, outside a version check or another handler."""
    if not node.handlers or not _catches_import_errors(node):
        return False
    if any(re.search(r"\btorch\b", ctx.code_for(h.body)) for h in node.handlers):
        return False
    frames = _frames_of(ctx, node)
    return not any(f.kind == "except" for f in frames) and not _gated_at(ctx, frames, node, False)


def _frames_of(ctx: ModuleContext, node: cst.CSTNode) -> Path:
    """The if/else and try/except frames around `node`, outermost first (as `Reference.path`)."""
    frames: List[Frame] = []
    child, parent = node, ctx.parent(node)
    while parent is not None:
        if isinstance(parent, cst.If) and child is not parent.test:
            frames.append(Frame("if" if child is parent.body else "else", parent, parent.test))
        elif isinstance(parent, cst.IfExp) and child is not parent.test:
            frames.append(Frame("if" if child is parent.body else "else", parent, parent.test))
        elif isinstance(parent, cst.Try) and child is parent.body:
            frames.append(Frame("try", parent))
        elif isinstance(parent, cst.ExceptHandler):
            frames.append(Frame("except", parent, parent.type))
        child, parent = parent, ctx.parent(parent)
    return tuple(reversed(frames))


def _binds_in_handlers(ctx: ModuleContext, name: str, owner: cst.Try) -> bool:
    """A handler of `owner` defines the stand-in: `class name`, `def name` or `name = ...`."""
    import libcst.matchers as m

    for d in m.findall(ctx.module, m.FunctionDef(name=m.Name(name)) | m.ClassDef(name=m.Name(name))):
        if _in_handlers(ctx, d, owner):
            return True
    return any(_in_handlers(ctx, a.node, owner) for a in ctx.assignments_to(name))


def _in_handlers(ctx: ModuleContext, node: cst.CSTNode, owner: cst.Try) -> bool:
    parent = ctx.parent(node)
    while parent is not None:
        if isinstance(parent, cst.ExceptHandler) and ctx.parent(parent) is owner:
            return True
        if parent is owner:
            return False
        parent = ctx.parent(parent)
    return False


def _bound_outside(ctx: ModuleContext, name: str, owner: cst.Try, besides: Optional[cst.CSTNode] = None) -> bool:
    """`name` is bound (def, class, assignment other than `besides`) outside the handlers of `owner`."""
    import libcst.matchers as m

    for d in m.findall(ctx.module, m.FunctionDef(name=m.Name(name)) | m.ClassDef(name=m.Name(name))):
        if not _in_handlers(ctx, d, owner):
            return True
    return any(a.node is not besides and not _in_handlers(ctx, a.node, owner) for a in ctx.assignments_to(name))


def _called_outside(ctx: ModuleContext, name: str, owner: cst.Try) -> bool:
    """The file calls `name(...)` (or decorates with it) outside the handlers of `owner`, in code
    that is no version fallback."""
    import libcst.matchers as m

    for call in m.findall(ctx.module, m.Call(func=m.Name(name)) | m.Decorator(decorator=m.Name(name))):
        if not _in_handlers(ctx, call, owner) and not _gated_at(ctx, _frames_of(ctx, call), call, False):
            return True
    return False


def _stand_in_binding(ctx: ModuleContext, owner: cst.CSTNode, node: cst.CSTNode) -> bool:
    """`node` is the whole value of `name = <deprecated API>` directly in the body of the `try`
    `owner` whose handlers define a stand-in (`autocast = torch.cuda.amp.autocast`, `except:
    class autocast: ...`), and the file calls `name` outside them: a binding the file uses on
    every torch that has the API, not a probe of it."""
    if not isinstance(owner, cst.Try) or not _stand_in_try(ctx, owner):
        return False
    assign = ctx.parent(node)
    if not isinstance(assign, cst.Assign) or assign.value is not node or len(assign.targets) != 1:
        return False
    target = assign.targets[0].target
    line = ctx.parent(assign)
    if not isinstance(target, cst.Name) or not isinstance(line, cst.SimpleStatementLine) or line not in owner.body.body:
        return False
    name = target.value
    if _bound_outside(ctx, name, owner, besides=assign) or not _binds_in_handlers(ctx, name, owner):
        return False
    return _called_outside(ctx, name, owner)


def _other_device(qualified: str, name: str) -> bool:
    """`torch.npu.amp.GradScaler`, `torch_npu.npu.amp.autocast`: another device's AMP name,
    neither torch's device-generic API nor a deprecated one."""
    module, _, last = qualified.rpartition(".")
    if last != name or qualified in DEPRECATED_AMP or not module.endswith(".amp"):
        return False
    return module not in ("torch", "torch.amp", "torch.cuda.amp", "torch.cpu.amp")


def _imports_with_paths(module: cst.Module) -> Iterator[Tuple[cst.ImportFrom, Path]]:
    """Every `from ... import ...` at module level or in its if/elif/else branches (not in a
    `try`, a function or a class), with its if/else frames."""
    stack: List[Tuple[cst.CSTNode, Path]] = [(s, ()) for s in reversed(module.body)]
    while stack:
        node, path = stack.pop()
        if isinstance(node, cst.SimpleStatementLine):
            for small in node.body:
                if isinstance(small, cst.ImportFrom):
                    yield small, path
        elif isinstance(node, cst.If):
            parts: List[Tuple[cst.CSTNode, Path]] = [(s, path + (Frame("if", node, node.test),)) for s in node.body.body]
            if isinstance(node.orelse, cst.If):
                parts.append((node.orelse, path + (Frame("else", node, node.test),)))
            elif isinstance(node.orelse, cst.Else):
                parts.extend((s, path + (Frame("else", node, node.test),)) for s in node.orelse.body.body)
            stack.extend(reversed(parts))


def _dispatch_message(ctx: ModuleContext, alias: cst.ImportAlias, api: DeprecatedApi, others: List[str]) -> str:
    name = ctx.code_for(alias.name)
    alternatives = ", ".join(f"`{o.rpartition('.')[0]}`" for o in others)
    return f"`{name}` from `{api.old.rpartition('.')[0]}` (beside {alternatives}) is deprecated"


def _dispatch_data(ctx: ModuleContext, alias: cst.ImportAlias, api: DeprecatedApi) -> dict:
    return {
        "snippet": f"from {api.old.rpartition('.')[0]} import {ctx.code_for(alias.name)}",
        "names": {},
        "use": "import",
        "deprecated": api.old,
        "replacement": f"torch.{api.new}",
        "device": api.device,
        "category": api.category,
        "warning": api.warning,
    }


def _catches_import_errors(node: cst.CSTNode) -> bool:
    if not isinstance(node, cst.Try):
        return False
    for handler in node.handlers:
        if handler.type is None:
            return True
        text = cst.Module([]).code_for_node(handler.type)
        if any(e in text for e in ("ImportError", "AttributeError", "ModuleNotFoundError")):
            return True
    return False


def _after_version_return(ctx: ModuleContext, node: cst.CSTNode) -> bool:
    """True when an earlier statement of an enclosing block is `if <version or
    hasattr check>: ... return/raise`, so this code is the old-torch fallback."""
    child = node
    parent = ctx.parent(child)
    while parent is not None:
        body = None
        if isinstance(parent, (cst.IndentedBlock, cst.Module)):
            body = parent.body
        if body is not None:
            for stmt in body:
                if stmt is child:
                    break
                if isinstance(stmt, cst.If) and _returns(stmt.body) and _torch_version_test(ctx.code_for(stmt.test)):
                    return True
        if isinstance(parent, (cst.FunctionDef, cst.ClassDef)):
            return False
        child, parent = parent, ctx.parent(parent)
    return False


def _returns(block: cst.BaseSuite) -> bool:
    """The block ends in `return` (a `raise` guards unsupported versions: the
    code after it is the main path, not a fallback)."""
    stmts = block.body if isinstance(block, cst.IndentedBlock) else [block]
    if not stmts:
        return False
    last = stmts[-1]
    if isinstance(last, (cst.SimpleStatementLine, cst.SimpleStatementSuite)):
        return any(isinstance(s, cst.Return) for s in last.body)
    return False


def _torch_version_test(text: str) -> bool:
    return "torch" in text.lower() and any(w in text for w in _VERSION_WORDS)


def _message(ctx: ModuleContext, ref: Reference, api: DeprecatedApi) -> str:
    spelled = ctx.code_for(ref.node)
    name = f"`{api.old}`" if spelled == api.old else f"`{spelled}` (`{api.old}`)"
    if api.kind == "scaler" and ref.use == "bare":
        return f"{name} is deprecated, and no `torch.amp.GradScaler` is an instance of it"
    return f"{name} is deprecated"


def _needs(ctx: ModuleContext, version: Tuple[int, int]) -> str:
    """With no torch floor known (no `torch-version`, none in the project's requirements),
    the fix's title says which torch it needs."""
    return "" if ctx.config.torch_version is not None else f" (needs torch >= {version[0]}.{version[1]})"


def _help_for(api: DeprecatedApi) -> str:
    if api.kind in ("custom_fwd", "custom_bwd"):
        return f'Use `@torch.{api.new}(device_type="{api.device}")`'
    return f'Use `torch.{api.new}("{api.device}", ...)`'


def _help(ref: Reference, api: DeprecatedApi) -> str:
    if api.kind in ("custom_fwd", "custom_bwd"):
        return f'Use `@torch.{api.new}(device_type="{api.device}")`'
    if api.kind == "scaler" and ref.use == "bare":
        return "Check against `torch.amp.GradScaler`"
    return f'Use `torch.{api.new}("{api.device}", ...)`'


def _data(ctx: ModuleContext, ref: Reference, api: DeprecatedApi) -> dict:
    flagged = ref.call if ref.call is not None else ref.node
    return {
        "snippet": ctx.code_for(flagged),
        "names": imported_names(ctx, flagged),
        "use": ref.use,
        "deprecated": api.old,
        "replacement": f"torch.{api.new}",
        "device": api.device,
        "category": api.category,
        "warning": api.warning,
    }


def _rewrite(ctx: ModuleContext, ref: Reference, prefix: str) -> Optional[List]:
    """Edits rewriting one reference to the device-generic API, or None."""
    api = _deprecated(ctx, ref)
    if api is None or ref.use == "bare":
        return None
    version = ctx.config.torch_version
    if version is not None and version < api.min_torch:
        return None
    device = f'"{api.device}"'
    if api.kind in ("custom_fwd", "custom_bwd"):
        new = f"{prefix}.{api.new}"
        if ref.use == "decorator":
            return [replace_node(ctx, ref.node, f'{new}(device_type={device})')]
        call = ref.call
        if not call_is_plain(call) or _positional_count(call) > len(api.params):
            return None
        if any(a.keyword is not None and a.keyword.value == "device_type" for a in call.args):
            return None
        return [
            replace_node(ctx, ref.node, new),
            *insert_keyword_edits(ctx, call, api.params),
            append_argument_edit(ctx, call, f"device_type={device}"),
        ]
    if ref.use != "call":
        return None  # `@torch.cuda.amp.autocast` without parentheses is a bug of its own
    call = ref.call
    if not call_is_plain(call) or _positional_count(call) > len(api.params):
        return None
    if any(a.keyword is None and literal_string(a.value) is not None for a in call.args):
        return None  # `torch.cuda.amp.autocast("cuda")` passes enabled="cuda"
    if api.kind == "state":
        if any(a.keyword is not None for a in call.args):
            return None
        new = f"{prefix}.{api.new}"
        keywords: tuple = (None,) * len(api.params)
    elif api.kind == "autocast" and version is not None and version < (2, 3):
        new = f"{prefix}.autocast"  # torch.autocast: since 1.10
        keywords = api.params
    else:
        new = f"{prefix}.{api.new}"
        keywords = api.params
    if not call.args:
        return [replace_node(ctx, call, f"{new}({device})")]
    return [replace_node(ctx, ref.node, new), *insert_keyword_edits(ctx, call, keywords, first=f"{device}, ")]


def _positional_count(call: cst.Call) -> int:
    return sum(1 for a in call.args if a.keyword is None)
