"""AMP002 cuda-autocast-device-type."""
from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any, Dict, Iterator, List, Optional, Set, Tuple

from amplint.model import Diagnostic, Invalid, Project, Rule, Severity, Valid

if TYPE_CHECKING:  # the per-file model: the functions that run it import it (check_project needs no libcst)
    import libcst as cst

    from amplint.model import (
        DEPRECATED_AMP, AutocastRegion, CallInfo, ModuleContext, Reference, Scope, assignment_before, call_is_plain,
        dotted_name, imported_names, insert_keyword_edits, literal_string, make_fix, option_values, replace_node,
        rewrite_with_imports,
    )


_TYPE_ERROR = "TypeError: autocast.__new__() got an unexpected keyword argument 'device_type'"


class CudaAutocastDeviceType(Rule):
    """
    ## What it does
    Flags `torch.cuda.amp.autocast(device_type=...)` (and the same call on
    `torch.cpu.amp.autocast`), in any import or alias spelling.

    Also, as a warning: a CUDA-only autocast region (`torch.cuda.amp.autocast()`,
    `torch.autocast("cuda")`) in a function that moves its tensors or model to
    a device the file shows may be the CPU or MPS by a choice: a literal, a
    conditional on a flag (`torch.device("cuda" if use_cuda else "cpu")` with
    `use_cuda = not args.no_cuda and ...`), an option whose default or
    choices name it (`--device`, `default="cpu"`), a branch of a setup method
    (`elif accelerator == "cpu": self.device = torch.device("cpu")`).

    Also, as a warning: an autocast whose `device_type` is a name bound to a
    two-way mapping onto "cuda" or "cpu" (`device_type = "cuda" if
    device.startswith("cuda") else "cpu"`) where the file binds that device to
    the MPS (`device = "mps"` after an MPS probe): on a Mac the region is a CPU
    autocast over MPS tensors. Reported at the mapping, once, with the regions
    taking it as related locations.

    ## Why is this bad?
    A CUDA autocast casts only CUDA ops (a CPU autocast only CPU ops): on CPU or MPS tensors the region
    does nothing and the step runs in fp32, silently on a machine with a GPU
    (without one torch warns and disables it). The device-specific autocast classes take `(enabled, dtype, cache_enabled)`;
    they have no `device_type` parameter. The call raises
    `TypeError: autocast.__new__() got an unexpected keyword argument
    'device_type'` the moment it runs. It is a common mix-up
    of the two APIs, spread by tutorials that import `autocast` from
    `torch.cuda.amp` and then call it with `device_type="cuda"`.

    ## Example
    ```python
    from torch.cuda.amp import autocast

    with autocast(device_type="cuda", dtype=torch.bfloat16):
        loss = model(x)
    ```

    ## Use instead
    ```python
    import torch

    with torch.autocast(device_type="cuda", dtype=torch.bfloat16):
        loss = model(x)
    ```

    ## Fix safety
    Safe: the call is rewritten to `torch.autocast(...)` (available since torch
    1.10), keeping every keyword and mapping any positional argument to the
    keyword it had (`enabled`, `dtype`, `cache_enabled`). `import torch` is
    added when missing and a `from torch.cuda.amp import autocast` left unused
    is removed. No fix for calls with `*args`/`**kwargs` or when
    `torch-version` is older than 1.10.

    ## Verification
    `amplint --verify` makes the same call on the installed torch and reports
    the TypeError.

    ## Notes
    The device warning is silent when the CPU is only the fallback of an
    availability probe (`"cuda" if torch.cuda.is_available() else "cpu"`:
    torch warns there), when the region sits under a CUDA guard or its
    `enabled=` names one (`if device.type == "cuda":`, `enabled=use_cuda`), for
    `enabled=False` and fp32 regions, for regions that take the device from
    the tensors (`torch.autocast(device_type=x.device.type)`), and for a device
    chosen in another file (a base class's `_acquire_device()` there, the
    command line parsed by another script: not followed yet). A device another
    method of the class moves to counts for the region only when the region can
    see what it moved: the object's state (`self.model = model.to(self.device)`)
    or the values of a method that calls the region's method or that it calls
    (`self._prepare(batch)`); not a sibling moving its own inputs while the
    region runs the tensors its caller passes (a T5 embedder's `__call__`). The MPS mapping
    is silent when the region sits under a test naming the MPS, CUDA or the
    mapped name (`if device_type == "cuda":`, llm.c's `ctx = autocast(...) if
    device_type == "cuda" else nullcontext()`), when the mapping has an "mps" arm, and when the file never
    binds the device to "mps". Silent too when the region's function, or every
    same-file caller of it, wraps a module in `DistributedDataParallel(model,
    device_ids=[rank])` on every path before it: DDP given `device_ids` raises
    `ValueError` for a CPU module, so a CPU choice never trains (a wrap behind
    `if args.distributed:` leaves the single-process path). Silent, too, on a move that
    brings results to the host: from the region's `with` on (`output = [o.to(cpu_device)
    for o in output]` in the region, after `videos = videos.to(device)` before it), in a
    function that moved something before the region to another device; the region runs
    where the inputs are, and that other device is judged on its own. One finding per device choice, at the region of
    the training step; the file's other CUDA-only regions on that device are
    related locations.

    Across files (the project model), as a warning: a Lightning
    `Trainer(precision="bf16-mixed")` (a literal, or either arm of a
    conditional: `32 if v1 else "bf16-mixed"`) whose `accelerator=` may be the
    CPU by a choice -- a literal `"cpu"`, a parameter of the function that a
    click option decorating it lets be "cpu" (`type=click.Choice(["gpu",
    "cpu"])`, `default="cpu"`), or an argparse option of the file whose
    literal choices or default include it (`args.accelerator`) -- given to
    `fit` / `validate` / `test` / `predict` a model (a project
    `LightningModule`, also built by `Model.load_from_checkpoint(...)`) whose
    hooks reach, through calls, a `torch.autocast("cuda", enabled=False)` region
    with no enabled region of its file around it. On the CPU Lightning enters
    `torch.autocast("cpu", dtype=torch.bfloat16)`, which a CUDA-only
    `enabled=False` does not turn off: the fp32 stretch the region was
    written for runs in bf16. Reported at the Trainer's `precision=`, with up
    to three of the regions as related locations (the chain of calls from the
    hook). Silent when the function holding such a region also turns off an
    autocast of another or a run-time device (`torch.autocast(x.device.type,
    enabled=False)`: that one shields the CPU too), for fp16 precisions
    (Lightning does not autocast fp16 on the CPU), and for an accelerator
    chosen in another file.

    The call raises wherever it runs, so unlike AMP001 this rule also fires
    inside version-gated branches. A name that may be either `torch.amp.autocast`
    or `torch.cuda.amp.autocast` (a try/except ImportError import) is left alone:
    the call is valid on the torch that takes the first branch.

    ## References
    - amplint's evidence page: `amplint --explain AMP002` (docs/evidence.md#amp002)
    - https://pytorch.org/docs/stable/amp.html#torch.autocast
    """

    code = "AMP002"
    name = "cuda-autocast-device-type"
    severity = Severity.ERROR
    message = "torch.cuda.amp.autocast has no device_type parameter"
    # the deprecated class is spelled through torch.cuda.amp / torch.cpu.amp / `from torch.cuda import amp`
    #: ... or a CUDA autocast of the generic API (`torch.autocast("cuda")`, `autocast(device_type="cuda")`)
    triggers = ("cuda.amp", "cpu.amp", "import amp", "autocast(")
    #: torch.cuda.amp.autocast(device_type=...) crashes; a CUDA region does nothing on a device the
    #: file names `"cpu"` or `"mps"` (a literal, a default, a choice)
    requires = (("device_type", "cpu", "mps"),)
    #: ... and a CUDA-only autocast may be spelled: the identifier `amp`, or the string "cuda"
    gate_check = "amplint.core.gates:cuda_autocast_possible"

    VALID = [
        Valid(
            """
import torch


def evaluate(model, loader, device):
    cpu_device = torch.device("cpu")
    results = {}
    for videos, ids in loader:
        videos = videos.to(device, non_blocking=True)
        with torch.cuda.amp.autocast():
            output = model(videos)
            output = [o.to(cpu_device) for o in output]
            results.update(zip(ids, output))
    return results
""",
            "the CPU device only fetches the region's outputs; the inputs went to `device` before it",
        ),
        Valid(
            """
import torch

class Embedder(torch.nn.Module):
    def __init__(self, encoder):
        super().__init__()
        self.device = "cpu"
        self.encoder = encoder

    def embed_texts(self, tokens):
        return self.encoder(tokens.to(self.device))

    @torch.no_grad()
    def __call__(self, tokens, mask):
        with torch.cuda.amp.autocast():
            return self.encoder(tokens, mask)
""",
            "a sibling moves its own inputs to the CPU; the region runs the tensors its caller passes",
        ),
        Valid(
            """
import torch
with torch.autocast(device_type="cuda", dtype=torch.bfloat16):
    loss = model(x)
""",
            "the generic autocast takes device_type",
        ),
        Valid(
            """
from torch.amp import autocast
with autocast(device_type="cuda"):
    loss = model(x)
""",
            "torch.amp.autocast imported by name",
        ),
        Valid(
            """
try:
    from torch.amp import autocast
except ImportError:
    from torch.cuda.amp import autocast
with autocast(device_type="cuda"):
    loss = model(x)
""",
            "ambiguous fallback import: valid on the torch that has torch.amp",
        ),
        Valid(
            """
from torch.cuda.amp import autocast
with autocast(dtype=torch.bfloat16):
    loss = model(x)
""",
            "deprecated but valid (AMP001's business)",
        ),
        Valid(
            """
from accelerate import Accelerator
accelerator = Accelerator()
with accelerator.autocast():
    out = model(batch, device_type="cuda")
""",
            "device_type passed to something else",
        ),
        Valid(
            """
import torch
device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
model = Net().to(device)
for x in loader:
    with torch.autocast("cuda", dtype=torch.float16):
        out = model(x.to(device))
""",
            "the CPU only as the fallback of an availability probe: torch warns and disables the region there",
        ),
        Valid(
            """
import torch
device = torch.device("cuda" if args.gpu else "cpu")
model = Net().to(device)
for x in loader:
    x = x.to(device)
    if device.type == "cuda":
        with torch.autocast("cuda"):
            out = model(x)
    with torch.cuda.amp.autocast(enabled=device.type == "cuda"):
        out = model(x)
""",
            "CUDA-only regions entered, or enabled, only on CUDA",
        ),
        Valid(
            """
import torch
device = torch.device("cuda" if args.gpu else "cpu")
model = Net().to(device)
with torch.autocast(device_type=device.type, dtype=torch.bfloat16):
    out = model(x.to(device))
""",
            "the region follows the device",
        ),
        Valid(
            """
import torch
device = "cuda" if torch.cuda.is_available() else "cpu"
device_type = "cuda" if "cuda" in device else "cpu"
with torch.autocast(device_type=device_type, dtype=torch.bfloat16):
    loss = model(x.to(device))
""",
            "the mapping covers every device the file picks (no MPS)",
        ),
        Valid(
            """
import torch
from contextlib import nullcontext
device = "mps" if torch.backends.mps.is_available() else "cuda"
device_type = "cuda" if "cuda" in device else "cpu"
if device_type == "cpu" or device == "mps":
    ctx = nullcontext()
else:
    with torch.autocast(device_type=device_type, dtype=torch.bfloat16):
        loss = model(x.to(device))
""",
            "the region is entered only off MPS",
        ),
        Valid(
            """
import torch
from contextlib import nullcontext
device = "mps" if torch.backends.mps.is_available() else "cuda"
device_type = "cuda" if "cuda" in device else "cpu"
ctx = torch.amp.autocast(device_type=device_type, dtype=torch.bfloat16) if device_type == "cuda" else nullcontext()
with ctx:
    loss = model(x.to(device))
""",
            "the autocast is picked only on CUDA (llm.c's held context)",
        ),
        Valid(
            """
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP


def train(model, device, loader, optimizer, scaler):
    for x, y in loader:
        x, y = x.to(device), y.to(device)
        with torch.cuda.amp.autocast():
            loss = model(x).sub(y).pow(2).mean()
        scaler.scale(loss).backward()


def main(args):
    use_cuda = not args.no_cuda and torch.cuda.is_available()
    dist.init_process_group(backend="nccl")
    device = torch.device("cuda" if use_cuda else "cpu")
    model = DDP(Net().to(device), device_ids=[args.local_rank])
    for epoch in range(args.epochs):
        train(model, device, loader, optimizer, scaler)
""",
            "DDP given `device_ids` raises for a CPU module before training: the CPU choice never reaches the region",
        ),
    ]

    INVALID = [
        Invalid(
            """
import torch
from torch.cuda.amp import autocast
with autocast(device_type="cuda", dtype=torch.bfloat16):
    loss = model(x)
""",
            line=3,
            fixed="""
import torch
with torch.autocast(device_type="cuda", dtype=torch.bfloat16):
    loss = model(x)
""",
        ),
        Invalid(
            """
import torch

class Trainer:
    def train_step(self, batch):
        with torch.cuda.amp.autocast(self.use_amp, device_type="cuda"):
            out = self.model(batch)
        return out
""",
            line=5,
            fixed="""
import torch

class Trainer:
    def train_step(self, batch):
        with torch.autocast(enabled=self.use_amp, device_type="cuda"):
            out = self.model(batch)
        return out
""",
        ),
        Invalid(
            """
from torch.cuda import amp as cuda_amp
from torch.cuda.amp import GradScaler
scaler = GradScaler()
for x in loader:
    if bf16:
        ctx = cuda_amp.autocast(device_type="cuda", dtype=torch.bfloat16)
    else:
        ctx = cuda_amp.autocast()
""",
            line=6,
            fixed="""
import torch
from torch.cuda import amp as cuda_amp
from torch.cuda.amp import GradScaler
scaler = GradScaler()
for x in loader:
    if bf16:
        ctx = torch.autocast(device_type="cuda", dtype=torch.bfloat16)
    else:
        ctx = cuda_amp.autocast()
""",
        ),
        Invalid(
            """
import torch.cpu.amp as cpu_amp
with cpu_amp.autocast(device_type="cpu"):
    out = model(x)
""",
            line=2,
            fixed="""
import torch
with torch.autocast(device_type="cpu"):
    out = model(x)
""",
        ),
    ]

    #: the MPS device mapped onto a CPU autocast (tests/test_rules_api.py runs them, with VALID)
    MPS_INVALID = [
        Invalid(
            """
import torch

device = "cpu"
if torch.cuda.is_available():
    device = "cuda"
elif torch.backends.mps.is_available():
    device = "mps"
device_type = "cuda" if device.startswith("cuda") else "cpu"
model = GPT().to(device)
for x, y in loader:
    x, y = x.to(device), y.to(device)
    with torch.autocast(device_type=device_type, dtype=torch.bfloat16):
        loss = model(x, y)
    loss.backward()
""",
            line=8,
            why="on a Mac the tensors are on MPS and the region is a CPU autocast: it casts no MPS op",
        ),
        Invalid(
            """
import torch

def train(model, loader, args):
    device = "mps" if args.mac else "cuda"
    amp_device = "cuda" if "cuda" in device else "cpu"
    for x in loader:
        with torch.autocast(amp_device, dtype=torch.bfloat16):
            loss = model(x.to(device))
        loss.backward()
""",
            line=5,
            why="a mapping of any name, in a function (the file's text passes the gate by the mapping)",
        ),
    ]

    #: the device-mismatch warnings (tests/test_rules_api.py runs them; INVALID holds the error clause)
    DEVICE_INVALID = [
        Invalid(
            """
import torch


def evaluate(model, loader, device):
    cpu_device = torch.device("cpu")
    for videos, ids in loader:
        videos = videos.to(cpu_device)
        with torch.cuda.amp.autocast():
            output = model(videos)
    return output
""",
            line=8,
            why="the inputs themselves go to the CPU device before the region",
        ),
        Invalid(
            """
import torch

def train(model, device, loader, optimizer):
    for data, target in loader:
        data, target = data.to(device), target.to(device)
        with torch.cuda.amp.autocast():
            loss = model(data, target)
        loss.backward()
        optimizer.step()

def main(args):
    use_cuda = not args.no_cuda and torch.cuda.is_available()
    device = torch.device("cuda" if use_cuda else "cpu")
    train(model, device, loader, optimizer)
""",
            line=6,
            why="--no-cuda puts the tensors on the CPU, where a CUDA autocast does nothing",
        ),
        Invalid(
            """
import torch

class Trainer:
    def __init__(self, model, accelerator="cuda"):
        if accelerator == "cuda":
            self.device = torch.device("cuda", 0)
        elif accelerator == "cpu":
            self.device = torch.device("cpu")
        self.model = model.to(self.device)

    def step(self, batch):
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = self.model(batch)
        loss.backward()
""",
            line=12,
        ),
        Invalid(
            """
import argparse
from torch.cuda.amp import autocast

parser = argparse.ArgumentParser()
parser.add_argument("--device", type=str, default="cpu")
args = parser.parse_args()

def main(args):
    model = Model().to(args.device)
    with autocast():
        out = model(load(args.image).to(args.device))
""",
            line=10,
            why="the option's default is the CPU",
        ),
        Invalid(
            """
import torch
from torch.nn.parallel import DistributedDataParallel as DDP


def train(model, device, loader):
    for x, y in loader:
        x, y = x.to(device), y.to(device)
        with torch.cuda.amp.autocast():
            loss = model(x).sub(y).pow(2).mean()
        loss.backward()


def main(args):
    device = torch.device("cuda" if not args.no_cuda else "cpu")
    model = Net().to(device)
    if args.distributed:
        model = DDP(model, device_ids=[args.local_rank])
    train(model, device, loader)
""",
            line=8,
            why="DDP only behind a flag: the single-process run may train on the CPU",
        ),
        Invalid(
            """
import torch

class Runner:
    def __init__(self, net):
        self.device = "cpu"
        self.net = net

    def _prepare(self, batch):
        return batch.to(self.device)

    def step(self, batch):
        x = self._prepare(batch)
        with torch.cuda.amp.autocast():
            return self.net(x)
""",
            line=13,
            why="the region runs what the helper it calls moved to the CPU",
        ),
    ]

    def check(self, ctx: ModuleContext) -> Iterator[Diagnostic]:
        yield from self._crashing(ctx)
        yield from self._mismatched(ctx)
        yield from self._mps_as_cpu(ctx)

    def check_project(self, project: Project) -> Iterator[Diagnostic]:
        """A Lightning `Trainer(precision="bf16-mixed")` whose accelerator may be the CPU by a
        choice, on a model whose code runs fp32 stretches in `torch.autocast("cuda", enabled=False)`:
        on the CPU, Lightning autocasts on the CPU, which those regions do not turn off."""
        from amplint.model import ProjectCall

        for path, summary in list(project.summaries.items()):
            for trainer in summary.get("lcpu", ()):
                choice = trainer.get("cpu") or _argparse_cpu(summary, trainer.get("opt"))
                if choice is None:
                    continue
                entries = project.lightning_entries(path, trainer["func"], trainer["target"])
                shielded = _cuda_only_shields(project, entries)
                if not shielded:
                    continue
                at, col, end_row, end_col = trainer["loc"]
                site = ProjectCall(path, trainer["func"], {"r": at, "c": col, "er": end_row, "ec": end_col})
                first, chain = shielded[0]
                more = f" (and {len(shielded) - 1} more)" if len(shielded) > 1 else ""
                message = f"On `{_short(choice)}`, a CUDA-only `enabled=False` in `{_short(first[1], 24)}`{more} leaves bf16 on"
                related = tuple(project.related(where, row, f"CUDA-only fp32 region (via {' -> '.join(k[1] for k in chain)})")
                                for (where, _, row), chain in shielded[:3])
                data = {"device": "cpu", "dtype": "bf16", "choice": choice, "regions": len(shielded)}
                yield project.diagnostic(
                    self, site, message, data=data, severity=Severity.WARNING, related=related,
                    help='Disable autocast for the region\'s device (`torch.autocast(x.device.type, enabled=False)`), or keep the Trainer\'s precision off on the CPU',
                )

    def _mps_as_cpu(self, ctx: ModuleContext) -> Iterator[Diagnostic]:
        """One finding per mapping, at the mapping; the regions that take it are related."""
        from amplint.model import dotted_name, imported_names

        groups: Dict[int, list] = {}
        for found in cpu_mapped_mps(ctx):
            groups.setdefault(id(found[4]), []).append(found)
        for group in groups.values():
            region, info, device, origin, mapping = group[0]
            mapped = next((dotted_name(a.value) for a in region.call.args if a.keyword is None or a.keyword.value == "device_type"), None)
            message = f"`{mapped}` maps `{device.value}` \"mps\" to \"cpu\": this autocast does nothing on MPS tensors"
            related = [ctx.related(origin, "the MPS is chosen here")]
            related.extend(ctx.related(g[0].call, "a CPU autocast on MPS tensors there") for g in group)
            yield ctx.diagnostic(
                self,
                mapping,
                message,
                severity=Severity.WARNING,
                related=tuple(related),
                help="Map the MPS to \"mps\" (a torch whose autocast supports it), or enter no autocast on MPS",
                data={
                    "kind": "mps-as-cpu",
                    "deprecated": region.qualname or "torch.autocast",
                    "snippet": ctx.code_for(region.call),
                    "names": imported_names(ctx, region.call),
                    "exception": None,
                    "device": "mps",
                    "dtype": region.dtype,
                },
            )

    def _mismatched(self, ctx: ModuleContext) -> Iterator[Diagnostic]:
        """One finding per device choice: at the region of a training step (a backward in its
        function) if any, else the first; the file's other regions on that device are related."""
        from amplint.model import dotted_name, imported_names

        groups: Dict[int, list] = {}
        for found in device_mismatches(ctx):
            groups.setdefault(id(found[3]), []).append(found)
        for group in groups.values():
            trains = [g for g in group if any("backward" in e.kind for e in g[1].scope.events)]
            region, info, device, origin, kind = (trains or group)[0]
            spelled = ctx.code_for(region.call)
            if len(spelled) > 40 or "\n" in spelled:
                spelled = (dotted_name(region.call.func) or "autocast") + "(...)"
            where = ctx.code_for(device)
            other = kind.upper() if kind == "cpu" else "MPS"
            message = f"`{spelled}` is CUDA-only, but `{where}` may be the {other}: the region does nothing there"
            if len(message) > 120:
                message = f"CUDA-only autocast, but `{where}` may be the {other}: the region does nothing there"
            related = [ctx.related(origin, f"the {other} is chosen here")]
            related.extend(ctx.related(g[0].call, "also CUDA-only on that device") for g in group if g[0] is not region)
            qualname = region.qualname or "torch.autocast"
            yield ctx.diagnostic(
                self,
                region.call,
                message,
                severity=Severity.WARNING,
                related=tuple(related),
                help="Use `torch.autocast(device_type=...)` with the type of the device the tensors are on",
                data={
                    "kind": "device-mismatch",
                    "deprecated": qualname,
                    "snippet": ctx.code_for(region.call),
                    "names": imported_names(ctx, region.call),
                    "exception": None,
                    "device": kind,
                    "dtype": region.dtype,
                },
            )

    def _crashing(self, ctx: ModuleContext) -> Iterator[Diagnostic]:
        from amplint.model import DEPRECATED_AMP, imported_names, make_fix, rewrite_with_imports

        flagged = [r for r in ctx.references() if _crashes(ctx, r)]
        for ref in flagged:
            edits = rewrite_with_imports(ctx, self.code, ref, flagged, lambda r, p: _rewrite(ctx, r, p))
            needs = "" if ctx.config.torch_version is not None else " (needs torch >= 1.10)"
            fix = make_fix(f"Use `torch.autocast(device_type=...)`{needs}", edits, safe=True) if edits else None
            old = DEPRECATED_AMP[min(ref.qualnames)].old  # min: a name bound two ways reads the same in every process
            spelled = ctx.code_for(ref.node)
            name = f"`{old}`" if spelled == old else f"`{spelled}` (`{old}`)"
            message = f"{name} has no `device_type` parameter; this call raises `TypeError`"
            yield ctx.diagnostic(
                self,
                ref.call,
                message,
                fix=fix,
                help="Use `torch.autocast(device_type=...)`",
                data={
                    "deprecated": old,
                    "exception": _TYPE_ERROR,
                    "snippet": ctx.code_for(ref.call),
                    "names": imported_names(ctx, ref.call),
                },
            )


def _crashes(ctx: ModuleContext, ref: Reference) -> bool:
    from amplint.model import DEPRECATED_AMP

    if ref.use != "call" or ref.call is None:
        return False
    apis = [DEPRECATED_AMP.get(q) for q in ref.qualnames]
    if not apis or any(a is None or a.kind != "autocast" for a in apis):
        return False
    if ctx.is_rebound(ref.root):
        return False
    return any(a.keyword is not None and a.keyword.value == "device_type" for a in ref.call.args)


def _rewrite(ctx: ModuleContext, ref: Reference, prefix: str) -> Optional[List]:
    from amplint.model import DEPRECATED_AMP, call_is_plain, insert_keyword_edits, replace_node

    if not _crashes(ctx, ref):
        return None
    version = ctx.config.torch_version
    if version is not None and version < (1, 10):
        return None
    call: cst.Call = ref.call
    api = DEPRECATED_AMP[min(ref.qualnames)]  # min, not the set's hash order
    if not call_is_plain(call) or sum(1 for a in call.args if a.keyword is None) > len(api.params):
        return None
    return [replace_node(ctx, ref.node, f"{prefix}.autocast"), *insert_keyword_edits(ctx, call, api.params)]


# ------------------------------------------------------------------ CUDA autocast on a chosen device

#: the device types on which a CUDA autocast region does nothing
_OTHER_DEVICES = ("cpu", "mps")
#: availability probes: a CPU device picked only when they fail is the machine's, not a choice
_PROBES = frozenset(("torch.cuda.is_available", "torch.backends.mps.is_available"))
#: a CUDA guard around the region or in its `enabled=` (`if device.type == "cuda":`, `enabled=use_cuda`)
_GUARD = re.compile(r"cuda|gpu", re.IGNORECASE)

#: (the device expression, the value that may be another device, a note on where it is chosen)
_Choice = Tuple["cst.BaseExpression", "cst.CSTNode", str]


def _other_device(text: Optional[str]) -> Optional[str]:
    """'cpu' / 'mps' for a device string naming one of them (`"cpu"`, `"mps:0"`), else None."""
    if text is None:
        return None
    kind = text.strip().lower().split(":", 1)[0]
    return kind if kind in _OTHER_DEVICES else None


def _probe_only(ctx: ModuleContext, test: Optional[cst.CSTNode], scope: Scope, statement: cst.CSTNode, order: int, depth: int = 0) -> bool:
    """`test` decides only whether CUDA (or MPS) is available: `torch.cuda.is_available()`, its
    negation and conjunctions, or a local bound to one (`use_cuda = torch.cuda.is_available()`)."""
    import libcst as cst

    from amplint.model import assignment_before

    while isinstance(test, cst.UnaryOperation) and isinstance(test.operator, cst.Not):
        test = test.expression
    if isinstance(test, cst.BooleanOperation):
        return all(_probe_only(ctx, t, scope, statement, order, depth) for t in (test.left, test.right))
    if isinstance(test, cst.Call):
        return not ctx.qualnames(test.func).isdisjoint(_PROBES)
    if isinstance(test, cst.Name) and depth < 2:
        a = assignment_before(ctx, test.value, scope, statement, order)
        return a is not None and not a.unpacked and _probe_only(ctx, a.value, a.scope, a.statement or a.node, a.order, depth + 1)
    return False


def _chosen(ctx: ModuleContext, value: cst.BaseExpression, scope: Scope, statement: cst.CSTNode, order: int, depth: int = 0) -> Optional[Tuple[cst.CSTNode, str]]:
    """Where `value` may be a CPU/MPS device by a choice the file shows (a literal, a branch of a
    conditional not decided by an availability probe alone, a command-line option whose default or
    choices name it), with a note naming that device; None when no such choice is visible."""
    import libcst as cst

    from amplint.model import assignment_before, dotted_name, literal_string, option_values

    if depth > 3:
        return None
    text = literal_string(value)
    if text is not None:
        kind = _other_device(text)
        return (value, kind) if kind else None
    if isinstance(value, cst.Call) and "torch.device" in ctx.qualnames(value.func) and value.args:
        first = value.args[0]
        if first.keyword is None or first.keyword.value == "type":
            return _chosen(ctx, first.value, scope, statement, order, depth + 1)
        return None
    if isinstance(value, cst.IfExp):
        if _probe_only(ctx, value.test, scope, statement, order):
            return None
        for branch in (value.body, value.orelse):
            found = _chosen(ctx, branch, scope, statement, order, depth + 1)
            if found is not None:
                return found
        return None
    if isinstance(value, cst.Attribute):
        values = option_values(ctx, value)
        if values:
            kinds = sorted({k for k in map(_other_device, values) if k})
            if kinds:
                return value, kinds[0]
        spelled = dotted_name(value)
        if spelled is not None and spelled.startswith("self.") and scope.cls is not None:
            return _assigned(ctx, [a for a in ctx.assignments_to(spelled) if a.scope.cls is scope.cls], depth)
        return None
    if isinstance(value, cst.Name):
        a = assignment_before(ctx, value.value, scope, statement, order)
        return _assigned(ctx, [a] if a is not None else [], depth)
    return None


def _assigned(ctx: ModuleContext, assignments: list, depth: int) -> Optional[Tuple[cst.CSTNode, str]]:
    """The first of `assignments` binding a chosen CPU/MPS device outside a branch an
    availability probe alone decides."""
    for a in sorted(assignments, key=lambda a: a.order):
        if a.unpacked:
            continue
        tests = [f.test for f in a.path if f.kind in ("if", "else") and f.test is not None]
        if tests and _probe_only(ctx, tests[-1], a.scope, a.statement or a.node, a.order):
            continue  # `if torch.cuda.is_available(): ... else: device = "cpu"`: the machine's fallback
        found = _chosen(ctx, a.value, a.scope, a.statement or a.node, a.order, depth + 1)
        if found is not None:
            return found
    return None


def _caller_values(ctx: ModuleContext, scope: Scope, name: str) -> List[Tuple[cst.BaseExpression, CallInfo]]:
    """What this file's calls of the plain function `scope` pass for its parameter `name`."""
    if scope.cls is not None or scope.is_module or name not in scope.params:
        return []
    index = scope.params.index(name)
    out = []
    for call in ctx.calls:
        if call.dotted == scope.name and call.scope is not scope:
            arg = call.arg(index, name)
            if arg is not None:
                out.append((arg, call))
    return out


def _device_choice(ctx: ModuleContext, scope: Scope, device: cst.BaseExpression, call: CallInfo) -> Optional[Tuple[cst.CSTNode, str]]:
    """Where the device `device`, which `call` in `scope` moves something to, may be a CPU/MPS
    device by a choice: through its own value, or the argument same-file callers pass for it."""
    import libcst as cst

    from amplint.model import assignment_before

    found = _chosen(ctx, device, scope, call.statement, call.order)
    if found is None and isinstance(device, cst.Name) and assignment_before(ctx, device.value, scope, call.statement, call.order) is None:
        for arg, site in _caller_values(ctx, scope, device.value):
            found = _chosen(ctx, arg, site.scope, site.statement, site.order)
            if found is not None:
                break
    return found


def _moved_to(ctx: ModuleContext, scopes: List[Scope], self_only: bool) -> Iterator[Tuple[cst.BaseExpression, CallInfo]]:
    """The devices `.to(device)` calls in `scopes` move tensors or modules to (`self.` attributes
    only when `self_only`)."""
    import libcst as cst

    from amplint.model import dotted_name

    for scope in scopes:
        for call in scope.calls:
            if call.method != "to":
                continue
            device = call.arg(0, "device")
            if device is None or not isinstance(device, (cst.Name, cst.Attribute)):
                continue
            spelled = dotted_name(device)
            if spelled is None or (self_only and not spelled.startswith("self.")):
                continue
            yield device, call


def device_mismatches(ctx: ModuleContext) -> List[Tuple[AutocastRegion, CallInfo, cst.BaseExpression, cst.CSTNode, str]]:
    """CUDA-only autocast regions (`torch.cuda.amp.autocast()`, `torch.autocast("cuda")`; enabled,
    not fp32, a `with`) in a function that moves its tensors or model to a device the file shows
    may be the CPU or MPS by a choice; no CUDA guard around the region or in its `enabled=`."""
    import libcst as cst

    infos: Dict[int, CallInfo] = {id(c.node): c for c in ctx.calls}
    out = []
    for region in ctx.regions:
        if region.device != "cuda" or region.enabled is False or region.dtype == "fp32" or region.framework:
            continue
        if region.selector is not None or not isinstance(region.node, cst.With):
            continue
        info = infos.get(id(region.call))
        if info is None or info.scope.is_module:
            continue
        if any(f.test is not None and _GUARD.search(ctx.code_for(f.test)) for f in info.path if f.kind in ("if", "else")):
            continue
        enabled = info.arg(0 if region.qualname and "cuda.amp" in region.qualname else None, "enabled")
        if enabled is not None and _GUARD.search(ctx.code_for(enabled)):
            continue
        scope = info.scope
        found = None
        moves = list(_moved_to(ctx, [scope], self_only=False))
        for device, move in moves:
            if _fetches_results(ctx, info, device, move, moves):
                continue  # `o.to(cpu_device)` of the outputs, the inputs moved to `device` before
            choice = _device_choice(ctx, scope, device, move)
            if choice is not None:
                found = (device, *choice)
                break
        if found is None and scope.cls is not None:
            family = [s for s in ctx.scopes if s.cls is scope.cls]
            for device, move in _moved_to(ctx, family, self_only=True):
                if move.scope is not scope and not _reaches_region(ctx, move, scope):
                    continue  # a sibling's own inputs (`tokens.to(self.device)`), not what the region runs on
                choice = _device_choice(ctx, move.scope, device, move)
                if choice is not None:
                    found = (device, *choice)
                    break
        if found is not None and not _cpu_path_raises(ctx, scope, info):
            out.append((region, info, *found))
    return out


def _fetches_results(
    ctx: ModuleContext, region: CallInfo, device: cst.BaseExpression, move: CallInfo,
    moves: List[Tuple[cst.BaseExpression, CallInfo]],
) -> bool:
    """`move` brings results to the host, not the region's inputs: it runs from the region's
    `with` on, and the function moved something else before the region to another device
    (`videos.to(device)`, then `output = [o.to(cpu_device) for o in output]` in the region):
    the region runs where the inputs are. That other device may itself be a choice (its own
    move is judged on its own)."""
    from amplint.model import dotted_name

    if move.order <= region.order:
        return False
    spelled = dotted_name(device)
    return any(
        other.order < region.order and dotted_name(d) != spelled
        for d, other in moves
    )


def _reaches_region(ctx: ModuleContext, move: CallInfo, scope: Scope) -> bool:
    """A sibling method's `.to(self.device)` says where the region's tensors are only when the
    region can see what it moved: the object's own state (`self.model.to(self.device)`, `self.x =
    x.to(self.device)`), or values of a method that calls the region's (`self.step(batch)`) or
    that the region's method calls (`self._prepare(batch)`). A method moving its own locals
    (a tokenizer's output in `get_text_embeddings`) says nothing of a `__call__` running the
    tensors its caller passes (HunyuanDiT's T5 embedder)."""
    import libcst as cst

    from amplint.model import dotted_name

    func = move.node.func
    if isinstance(func, cst.Attribute) and (dotted_name(func.value) or "").startswith("self."):
        return True
    statement = move.statement
    smalls = statement.body if isinstance(statement, cst.SimpleStatementLine) else [statement]
    for small in smalls:
        targets: List[cst.BaseExpression] = []
        if isinstance(small, cst.Assign):
            targets = [t.target for t in small.targets]
        elif isinstance(small, (cst.AnnAssign, cst.AugAssign)):
            targets = [small.target]
        for target in targets:
            for node in (target.elements if isinstance(target, (cst.Tuple, cst.List)) else [target]):
                node = node.value if isinstance(node, cst.Element) else node
                if (dotted_name(node) or "").startswith("self."):
                    return True

    def calls(caller: Scope, callee: Scope) -> bool:
        for call in caller.calls:
            f = call.node.func
            if callee.name == "__call__" and isinstance(f, cst.Name) and f.value == "self":
                return True
            if isinstance(f, cst.Attribute) and isinstance(f.value, cst.Name) and f.value.value == "self" and f.attr.value == callee.name:
                return True
        return False

    return calls(move.scope, scope) or calls(scope, move.scope)


#: DistributedDataParallel: given `device_ids`, it raises `ValueError` for a CPU module
_DDP = frozenset(("torch.nn.parallel.DistributedDataParallel", "torch.nn.parallel.distributed.DistributedDataParallel"))


def _cpu_path_raises(ctx: ModuleContext, scope: Scope, region: CallInfo) -> bool:
    """The run never reaches the region on the CPU: before it, on every path, the region's
    function or every same-file caller of it (one at least) wraps a module in
    `DistributedDataParallel(model, device_ids=[rank])`, which raises `ValueError` for a
    module on the CPU (MS-AMP's `mnist_ddp.py`: nccl, `device_ids=[args.local_rank]`)."""
    def wraps(where: Scope, before: int) -> bool:
        from amplint.model import dotted_name, literal_string

        for call in where.calls:
            if call.order >= before or not (ctx.qualnames(call.node.func) & _DDP):
                continue
            if any(f.kind in ("if", "else", "try") for f in call.path):
                continue  # behind a flag (`if args.distributed:`): the other path may be the CPU's
            ids = call.arg(1, "device_ids")
            if ids is not None and literal_string(ids) is None and dotted_name(ids) != "None":
                return True
        return False

    if wraps(scope, region.order):
        return True
    if scope.cls is not None or scope.is_module:
        return False
    callers = [c for c in ctx.calls if c.dotted == scope.name and c.scope is not scope and ctx.callee(c) is scope]
    return bool(callers) and all(wraps(c.scope, c.order) for c in callers)


#: the two device types a `"cuda" if ... else "cpu"` mapping names
_MAPPED = frozenset(("cuda", "cpu"))


def cpu_mapped_mps(ctx: ModuleContext) -> List[Tuple[AutocastRegion, CallInfo, cst.Name, cst.CSTNode, cst.IfExp]]:
    """Autocast regions (enabled, not fp32, a `with`) whose `device_type` is a local bound to a
    two-way mapping of a device onto "cuda" or "cpu" (`device_type = "cuda" if
    device.startswith("cuda") else "cpu"`) where the file also binds that device to "mps": on
    MPS the region is a CPU autocast, which casts no MPS op. With the device name, and where
    "mps" is chosen, and the mapping. No guard around the region naming the MPS, CUDA or the
    mapped name (`if device_type == "cuda":`, `autocast(...) if device_type == "cuda" else
    nullcontext()`)."""
    import libcst as cst

    from amplint.model import assignment_before, literal_string

    infos: Dict[int, CallInfo] = {id(c.node): c for c in ctx.calls}
    out = []
    for region in ctx.regions:
        if region.device is not None or region.enabled is False or region.dtype == "fp32" or region.framework:
            continue
        if region.selector is not None or not isinstance(region.node, cst.With):
            continue
        info = infos.get(id(region.call))
        arg = region.call.args[0].value if region.call.args and region.call.args[0].keyword is None else None
        for a in region.call.args:
            if a.keyword is not None and a.keyword.value == "device_type":
                arg = a.value
        if info is None or not isinstance(arg, cst.Name):
            continue
        guard = re.compile(rf"mps|cuda|gpu|\b{re.escape(arg.value)}\b", re.IGNORECASE)
        if any(f.test is not None and guard.search(ctx.code_for(f.test)) for f in info.path if f.kind in ("if", "else")):
            continue  # `if device_type == "cuda":`: entered only where the mapping is right
        if _chosen_arm(info.statement, region.call, guard, ctx):
            continue  # `ctx = torch.autocast(...) if device_type == "cuda" else nullcontext()`
        bound = assignment_before(ctx, arg.value, info.scope, info.statement, info.order)
        if bound is None or bound.unpacked or not isinstance(bound.value, cst.IfExp):
            continue
        mapping = bound.value
        if {literal_string(mapping.body), literal_string(mapping.orelse)} != _MAPPED:
            continue
        device = next((n for n in _names_in(mapping.test) if n.value != arg.value), None)
        if device is None:
            continue
        origin = _mps_binding(ctx, device.value, bound.scope)
        if origin is not None:
            out.append((region, info, device, origin, mapping))
    return out


def _chosen_arm(statement: cst.CSTNode, call: cst.Call, guard: "re.Pattern[str]", ctx: ModuleContext) -> bool:
    """`call` is an arm of a conditional expression in `statement` whose test `guard` matches."""
    import libcst as cst

    found = []

    class _Visitor(cst.CSTVisitor):
        def visit_IfExp(self, node: cst.IfExp) -> None:
            if (node.body is call or node.orelse is call) and guard.search(ctx.code_for(node.test)):
                found.append(node)

    statement.visit(_Visitor())
    return bool(found)


def _names_in(node: cst.CSTNode) -> List[cst.Name]:
    """The plain names a test reads (`device.startswith("cuda")`, `"cuda" in device`)."""
    import libcst as cst

    found: List[cst.Name] = []

    class _Visitor(cst.CSTVisitor):
        def visit_Attribute(self, node: cst.Attribute) -> bool:
            node.value.visit(self)
            return False

        def visit_Name(self, node: cst.Name) -> None:
            found.append(node)

    node.visit(_Visitor())
    return found


def _mps_binding(ctx: ModuleContext, name: str, scope: Scope) -> Optional[cst.CSTNode]:
    """Where the file binds `name` (in `scope`) to the MPS device: `device = "mps"`,
    `device = torch.device("mps")`, either arm of a conditional expression."""
    import libcst as cst

    from amplint.model import literal_string

    for a in ctx.assignments_to(name, scope):
        if a.unpacked:
            continue
        values = [a.value.body, a.value.orelse] if isinstance(a.value, cst.IfExp) else [a.value]
        for value in values:
            if isinstance(value, cst.Call) and "torch.device" in ctx.qualnames(value.func) and value.args:
                value = value.args[0].value
            if _other_device(literal_string(value)) == "mps":
                return value
    return None



#: how many calls deep, and how many functions, the regions under a Trainer's hooks are looked for
_MAX_DEPTH = 8
_MAX_FUNCTIONS = 2000


def _argparse_cpu(summary: Dict[str, Any], option: Optional[str]) -> Optional[str]:
    """`--accelerator cpu` when the file's argparse option of destination `option` has literal
    choices (or a literal default) that include "cpu"."""
    if option is None:
        return None
    found = [o for o in summary.get("opts", ()) if o[0] == option]
    if len(found) == 1 and ("cpu" in found[0][2] or found[0][3] == "cpu"):
        return f"{found[0][1]} cpu"
    return None


def _cuda_only_shields(project: Project, entries: List[Tuple[str, str]]) -> List[Tuple[Tuple[str, str, int], Tuple[Tuple[str, str], ...]]]:
    """((path, function, row), chain of functions from a hook) of each `torch.autocast("cuda",
    enabled=False)` region (an explicit CUDA device, no enabled region of its file around it) in
    the functions the hooks `entries` run, directly or through calls; none in a function that
    also turns off an autocast of another or a run-time device there (it shields the CPU too)."""
    from amplint.model import ProjectCall

    found: List[Tuple[Tuple[str, str, int], Tuple[Tuple[str, str], ...]]] = []
    seen: Set[Tuple[str, str]] = set(entries)
    frontier = [(key, (key,)) for key in entries]
    while frontier and len(seen) < _MAX_FUNCTIONS:
        following = []
        for key, chain in frontier:
            info = project.function(key)
            if info is None:
                continue
            regions = project.summaries[key[0]]["regions"]
            shields, other = set(), False
            for record in info["calls"]:
                index = record["g"]
                while index >= 0:
                    r = regions[index]
                    if r.get("enabled") is False and not r.get("via") and not r.get("framework"):
                        if r.get("device") == "cuda":
                            shields.add(r["row"])
                        else:
                            other = True
                    index = r["parent"]
                if len(chain) < _MAX_DEPTH:
                    for callee in project.callees(ProjectCall(key[0], key[1], record)):
                        if callee not in seen:
                            seen.add(callee)
                            following.append((callee, (*chain, callee)))
            if not other:
                found.extend(((key[0], key[1], row), chain) for row in sorted(shields) if _outermost(regions, row))
        frontier = following
    return found


def _outermost(regions: List[Dict[str, Any]], row: int) -> bool:
    """The disabled region at `row` has no region of its file around it that may be enabled."""
    for r in regions:
        if r["row"] == row and r.get("enabled") is False:
            parent = r["parent"]
            while parent >= 0:
                if regions[parent].get("enabled") is not False:
                    return False
                parent = regions[parent]["parent"]
            return True
    return False


def _short(text: str, limit: int = 24) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 3] + "..."
