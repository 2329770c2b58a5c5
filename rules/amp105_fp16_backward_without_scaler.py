"""AMP105 fp16-backward-without-scaler."""
from __future__ import annotations

import functools
import re

from typing import TYPE_CHECKING, Any, Dict, Iterator, List, Optional, Set

from amplint.model import Diagnostic, Invalid, Rule, Severity, Valid

if TYPE_CHECKING:  # the per-file model: its functions import what they run (check_project needs no libcst)
    import libcst as cst

    from amplint.model import Assignment, AutocastRegion, CallInfo, Event, ModuleContext, ScaleFinding, ScaleView, Scope


class Fp16BackwardWithoutScaler(Rule):
    """
    ## What it does
    Flags `loss.backward()` on a loss computed under an fp16 autocast region
    (an explicit `dtype=torch.float16`, or CUDA's default) in a file that has
    no GradScaler at all, or only one switched by a flag of its own.

    ## Why is this bad?
    Under fp16 autocast the backward pass runs the fp16 ops in fp16, so their
    gradients live in fp16's range: values below its smallest subnormal
    (5.96e-8) flush to zero and values below its smallest normal (6.1e-5) keep
    only a few bits. Small gradients, common deep in a network
    and late in training, vanish without any error. Loss scaling (65536 by
    default) shifts them into range before the backward and unscales them in
    fp32 before the step. bf16 has fp32's exponent range
    and needs no scaler.

    ## Example
    ```python
    for x, y in loader:
        with torch.autocast("cuda", dtype=torch.float16):
            loss = loss_fn(model(x), y)
        loss.backward()
        optimizer.step()
    ```

    ## Use instead
    ```python
    scaler = torch.amp.GradScaler("cuda")
    for x, y in loader:
        with torch.autocast("cuda", dtype=torch.float16):
            loss = loss_fn(model(x), y)
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
    ```
    Or use `dtype=torch.bfloat16` where the hardware supports it.

    ## Fix safety
    No fix: adding a scaler changes the step (`scaler.step`, `scaler.update`)
    and the checkpoint.

    ## Verification
    `amplint --verify` runs a tiny fp16 autocast model whose gradients are
    small and reports how many gradient elements are zero without a scaler and
    with one.

    ## At run time
    `amplint run` reports AMP105 at the `backward()` call when a loss from an
    fp16 autocast forward is backpropagated unscaled, with the share of
    gradient values flushed to zero: right before that backward (once per
    call site) the same backward runs once more through `torch.autograd.grad`
    with the loss multiplied by 2^14; of the parameter-gradient values that
    pass finds nonzero and finite, the share the program's own backward left
    unchanged (zero) is the flushed share (`flushed_share`, `flushed`,
    `nonzero_scaled` in events.jsonl). Values that are zero in any precision
    (a dead ReLU unit) are not counted. The extra pass writes no `.grad`;
    backward hooks of the program see it once.

    ## Notes
    A region whose dtype is picked at run time among literals the file spells
    (`ptdtype = {'float32': torch.float32, 'bfloat16': torch.bfloat16,
    'float16': torch.float16}[args.dtype]`, `torch.float16 if c else
    torch.bfloat16`, `getattr(torch, name)` with literal names, or a context
    picked from a dict of autocasts: `with {"bf16": autocast(dtype=torch.bfloat16),
    "fp16": autocast(dtype=torch.float16), "fp32": nullcontext()}[args.precision]:`) counts when
    float16 is one of them, at the same severity as a run-time `enabled=`:
    the code offers that fp16 path, and on it nothing scales the loss (the
    message says "may be fp16"). Where the table's key is an argparse option with
    literal `choices` (`--dtype`, choices `float16`/`bfloat16`), only the entries
    those choices select count: choices with no fp16 entry leave the rule silent,
    and a choice that selects fp16 is named in the message (`when --dtype is
    float16: ...`). A dtype bound in an `if`/`elif` testing such an option
    (`if args.dtype in ["float16", "fp16"]: dtype = torch.float16`) is a
    candidate when the choices hold a value the test accepts, and names it. A
    `dtype=` that is a parameter of the region's function, never rebound in it,
    is read at the function's calls in the file: what each passes (by position or
    keyword), the parameter's default where a call passes nothing; with no call in
    the file it gives no candidate. The severity stays a warning: the fp16 run is a supported,
    documented choice, not necessarily the one the user makes, but on it the
    underflow is certain.
    Silent when the region is bf16, when its dtype is decided at run time
    with no literal candidate in the file (`dtype=dtype` of a parameter no
    call in the file passes, a config value), on CPU autocast without a dtype (bf16 by default), for
    framework backward calls (`accelerator.backward(loss)`,
    `self.manual_backward(loss)`, DeepSpeed's `engine.backward(loss)`), for
    apex's `amp.scale_loss`, and whenever any GradScaler or `scaler` name
    appears in the file (it may be scaled elsewhere), but one: every GradScaler
    of the file is switched by flags of its own (`GradScaler(enabled=self.enable_scaler)`,
    `self.enable_scaler = config["enable_scaler"]`) that the fp16 region's run-time
    `enabled=` and `dtype=` never read (`autocast(enabled=self.enable_amp)`), followed
    through the file's assignments; then `scaler.scale(loss).backward()` counts, and the
    message names both switches (`with self.enable_amp on and self.enable_scaler off`).
    A switch read from a function's parameter (what the caller passes may be the other
    flag), a region always on, or a scaler built unconditionally leaves the rule silent.
    One more shape counts in a file with GradScalers: a fork on a dtype the region does
    not read. The region is fp16 whatever the model's dtype is (no `dtype=` on CUDA, or
    `dtype=torch.float16`), the loss is scaled only in the body of an `if` testing that
    dtype (`if cfg.mixed_precision and cfg.model_dtype == "float16": scaler.scale(loss).backward()`,
    the test or one conjunct of an `and`), and the `else` backpropagates the same loss
    unscaled (`loss.backward()`): a bf16 model takes the `else` under fp16 autocast. The
    message names the test. Silent when the test reads the region's own switch or dtype
    (`if cfg.amp:` around the scaled branch of `autocast(enabled=cfg.amp)`: the `else`
    runs with the region off; `dtype=getattr(torch, cfg.model_dtype)`: the `else` is bf16),
    on an `or` test, and when the region's switch is a parameter.
    A region whose `dtype=` is a configuration object's property, with no literal in the
    file (`torch.autocast("cuda", dtype=self.cfg.autocast_precision)`), counts when the
    project maps it to literal dtypes that include float16: every definition of that name
    in the project is a property (`cfg.amp_dtype()`: a method taking only `self`) whose
    returns are torch dtype literals, one of them `torch.float16`
    (`if self.precision == "amp_fp16": return torch.float16`, OLMo's documented option),
    and nothing assigns an attribute or a class field of that name. The message names
    the choice (`when cfg.autocast_precision is float16: ...`); a property returning a
    dtype looked up at run time (`getattr(torch, self.dtype_name)`), a field of the same
    name, or a mapping with no fp16 leaves the rule silent.
    A region with no dtype on a device read at run time
    (`torch.autocast(device_type=self.device.type)`) may be fp16: CUDA's default, taken
    on a GPU; the message says "may be fp16". It counts only in a file that steps an
    optimizer itself (a test comparing two implementations' gradients on whatever device
    it runs is silent). A region with a run-time
    `enabled=` still counts: when it is on, the scaler is missing. Silent, too, on a
    script that never updates parameters (no optimizer built or stepped and no
    `zero_grad()` in the file: a benchmark timing `backward()`, a gradient check),
    for its module-level code and the functions it calls itself; a function the
    file only defines (a `training_step` whose caller steps) still counts.
    More generally the backward needs an optimizer update within its reach: a
    step (an optimizer's or scheduler's `step()`, `scaler.step`, `zero_grad()` of
    an optimizer, a call named for an optimizer step the file does not define)
    in the function holding it, the functions it calls, or the functions that
    call it (the loop running the step helper) and theirs, three calls each
    way. A function nothing in the file calls is run from elsewhere: it counts
    when the file steps anywhere, or when it is an instance method (a trainer's
    `training_step`), takes an optimizer, returns a value, or is handed anything
    else (the model its caller steps) and backpropagates once per call. In a
    file that never steps, a static method or free function handed nothing and
    returning nothing (an equivalence check building its own nets and printing
    their `.grad` differences), or one repeating the backward in a loop of its
    own that steps nothing (a fwd+bwd timing), is silent. A test (`test*`, in
    a file importing pytest or unittest or one a test runner collects by its
    path) is run by the runner, which steps nothing after it: a backward smoke
    test under fp16 autocast, or a helper only tests call checking that
    gradients exist, is silent whatever else the file steps; a test that
    steps an optimizer itself keeps its finding.
    Silent, likewise, on a benchmark whose updates reach nothing it reports: the
    file's own script code measures memory or time (`torch.cuda.max_memory_allocated`,
    `reset_peak_memory_stats`, `torch.cuda.Event`, `time.perf_counter`, the
    profiler), nothing in the file keeps the model (no save, `state_dict`,
    checkpoint or export call), the function returns no value, and the loss is
    never read as a value (it only feeds `backward()`, `is None` tests and `del`):
    a VRAM benchmark stepping a throwaway optimizer reports the same numbers
    whether fp16 gradients underflow or not. A benchmark that prints the loss
    it trains, or saves what it trained, keeps its finding.
    A loss a helper of the file returns counts when it is computed, a few
    assignments back in the helper, from a value computed under its fp16 region
    (`pred = unet(x)` under `with autocast():`, `loss = F.mse_loss(pred.float(),
    y)` after it, `return loss`: the backward through the unet still runs in
    fp16). When that region is switched by a parameter of the helper (`if
    mixed_precision:` around it, or `enabled=mixed_precision`), the call must
    leave it on on some run the file shows: silent when the call passes a literal
    `False` / `None` (or nothing, over such a default), or hands down a
    parameter of its own function that every call of that function in the file
    passes off (`train_inversion(..., mixed_precision=False)`).
    The same holds where the backward's own function enters the region only when a
    parameter is on (`if with_amp: context = torch.cuda.amp.autocast()`, then `with
    context:`), and the function never rebinds it: silent when the file calls the
    function and every call leaves the parameter off. A call passing a local bound
    only to `False` / `None` (`with_amp = False`, then `self._run(with_amp=with_amp)`)
    leaves it off, and so does `mp.spawn(cls._worker, (with_fsdp, with_amp))`, read
    with the process index as the first argument. A function nothing in the file
    calls keeps its finding; one call that may pass the flag on keeps it too.
    An autocast held by a name and called later (`autocast = torch.cuda.amp.autocast
    if amp else suppress`, then `with autocast():`) is that autocast, on at run time.
    So is a context a script binds at module level below the function entering it
    (`def train_epoch(): with autocast_ctx: ...` above `if __name__ == "__main__":
    autocast_ctx = nullcontext() if cpu else autocast(dtype=dtype)`): the function reads
    the global when it runs, after the binding. A parameter or local of the same name is
    the function's own; a module name also bound to something else is on at run time.
    Only autocast regions are read. Not followed, so silent: a network that
    casts its own activations to fp16 (`x.to(torch.float16)` in the blocks a
    configuration marks fp16, weights cast to the input's dtype with the compute
    dtype taken from an environment variable), FSDP's `MixedPrecision` with a
    `param_dtype` from a config value, and a model cast to a configured dtype
    and trained through `accelerator.backward` of an `Accelerator()` without
    mixed precision. In each the fp16 path is a run-time choice the file does
    not spell, and often one its authors advise against; where the file does
    spell it (a literal candidate), the rule counts it as above.

    Across files (the project half, read from the wrapper summaries AMP801-AMP808
    use): a `loss.backward()` with no loss scaling in its file (no GradScaler, no
    `scaler` name, no `scaler` parameter) and an optimizer's `step()` after it in
    its function or class, where the function trains a model (calls it, clips it,
    takes its parameters, or computes the loss from it) that FSDP wraps with a
    mixed-precision policy of `param_dtype=torch.float16` (FSDP1's `MixedPrecision`, or
    FSDP2's `MixedPrecisionPolicy` given to `fully_shard`): the forward and the backward then
    run in fp16 as under fp16 autocast. The help names `ShardedGradScaler` for FSDP1 and the plain
    `torch.amp.GradScaler` for `fully_shard`, whose gradients are DTensors it handles. The policy is followed
    through names, helpers' returns and the tuple elements a helper returns
    (`mp_policy, wrap_policy = get_policies(cfg)`), also to a module-level policy
    of another file star-imported (`from pkg.policies import *`). When a helper
    binds the policy more than one way, it counts only where that helper probes
    bf16 support (`torch.cuda.is_bf16_supported()`) and every other choice is a
    bf16 or fp32 policy: the fp16 policy is then the project's own fallback on
    every GPU without bf16 (V100, T4), taken with the default configuration, and
    the message says so ("On GPUs without bf16, ..."). A policy chosen by a flag
    or a config value (`fp16_policy if cfg.use_fp16 else bf16_policy`) is left
    alone, as above.

    ## References
    - amplint's evidence page: `amplint --explain AMP105` (docs/evidence.md#amp105)
    - https://pytorch.org/docs/stable/amp.html#gradient-scaling
    """

    code = "AMP105"
    name = "fp16-backward-without-scaler"
    severity = Severity.WARNING
    message = "backward through fp16 autocast without a GradScaler"
    triggers = ("backward(",)
    requires = (("autocast",),)  # an fp16 autocast region in this file (every region is an autocast call)
    #: an autocast region: a call of autocast (any spelling ends so) or an import alias of it
    gate_regex = re.compile(r"autocast\s*\(|autocast\s+as\s")

    VALID = [
        Valid(
            """
import torch
import torch.nn.functional as F


def loss_step(batch, unet, mixed_precision=False):
    if mixed_precision:
        with torch.cuda.amp.autocast():
            pred = unet(batch["x"])
    else:
        pred = unet(batch["x"])
    loss = F.mse_loss(pred.float(), batch["y"].float())
    return loss


def train_inversion(unet, loader, optimizer, mixed_precision=False):
    for batch in loader:
        loss = loss_step(batch, unet, mixed_precision=mixed_precision)
        loss.backward()
        optimizer.step()


def main(unet, loader, optimizer):
    train_inversion(unet, loader, optimizer, mixed_precision=False)
""",
            "the helper's autocast is switched by a parameter every run the file shows leaves off",
        ),
        Valid(
            """
import contextlib
import torch
import torch.multiprocessing as mp


class TestHead:
    def test_head(self):
        with_amp = False
        self._run_loop(with_fsdp=True, with_amp=with_amp)

    @classmethod
    def _run_loop(cls, with_fsdp, with_amp):
        mp.spawn(cls._worker, (with_fsdp, with_amp), nprocs=2)

    @staticmethod
    def _worker(gpu_id, with_fsdp, with_amp):
        model, optimizer = build(with_fsdp)
        for batch in loader:
            context = contextlib.suppress()
            if with_amp:
                context = torch.cuda.amp.autocast()
            with context:
                loss = model(batch).mean()
            loss.backward()
            optimizer.step()
""",
            "the worker enters fp16 autocast only with with_amp on, and its only run passes it off",
        ),
        Valid(
            """
import torch
scaler = torch.amp.GradScaler("cuda")
for x, y in loader:
    with torch.autocast("cuda"):
        loss = loss_fn(model(x), y)
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    scaler.update()
""",
            "the documented fp16 step",
        ),
        Valid(
            """
import torch
for x, y in loader:
    with torch.autocast(device_type="cuda", dtype=torch.bfloat16):
        loss = loss_fn(model(x), y)
    loss.backward()
    optimizer.step()
""",
            "bf16 needs no scaler",
        ),
        Valid(
            """
import torch
def train(model, loader, optimizer, dtype):
    for x, y in loader:
        with torch.autocast("cuda", dtype=dtype):
            loss = model(x, y)
        loss.backward()
        optimizer.step()
""",
            "dtype decided at run time",
        ),
        Valid(
            """
from accelerate import Accelerator
accelerator = Accelerator(mixed_precision="fp16")
model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
for batch in loader:
    with accelerator.autocast():
        loss = model(**batch).loss
    accelerator.backward(loss)
    optimizer.step()
""",
            "accelerate scales inside accelerator.backward",
        ),
        Valid(
            """
import torch
for x in loader:
    with torch.autocast("cpu"):
        loss = model(x).sum()
    loss.backward()
""",
            "CPU autocast defaults to bf16",
        ),
        Valid(
            """
import torch
def train_step(model, batch, optimizer, scaler):
    with torch.autocast("cuda"):
        loss = model(batch)
    loss = scaler.scale(loss)
    loss.backward()
""",
            "a scaler passed in scales the loss",
        ),
        Valid(
            """
import torch
with torch.autocast("cuda"):
    preds = model(x)
loss = loss_fn(model_fp32(x), y)
loss.backward()
""",
            "the loss does not come from the fp16 region",
        ),
        Valid(
            """
import torch
net = FFMLP(32, 1, 64).cuda()
x = torch.rand(4096, 32, device="cuda")


def time_backward(net, x):
    with torch.cuda.amp.autocast(enabled=True):
        y = net(x)
        y.sum().backward()


with torch.autocast("cuda", dtype=torch.float16):
    y0 = net(x)
y0.sum().backward()
time_backward(net, x)
""",
            "a benchmark timing backward: no optimizer, so no update can underflow",
        ),
        Valid(
            """
import torch


class CHECKS:
    def check_fast_equals_ref():
        ref, fast = RefNet().half().cuda(), FastNet().half().cuda()
        x = torch.randn(8, 64).half().cuda().requires_grad_()
        x2 = x.detach().clone().requires_grad_()
        with torch.cuda.amp.autocast():
            y1 = ref(x)
            y1.sum().backward()
        with torch.cuda.amp.autocast():
            y2 = fast(x2)
            y2.sum().backward()
        print((x.grad - x2.grad).abs().sum())


class Throughput:
    @staticmethod
    def fwd_bwd(loader, model, amp=True):
        for images, targets in loader:
            with torch.cuda.amp.autocast(enabled=amp):
                loss = criterion(model(images), targets)
            loss.backward()
            torch.cuda.synchronize()
            return
""",
            "an equivalence check and a timing run nothing calls in the file, no optimizer anywhere: gradients no update reads",
        ),
        Valid(
            """
import pytest
import torch


class TrainingTesterMixin:
    def test_mixed_precision_training(self):
        model = self.model_class(**self.get_init_dict()).to("cuda")
        with torch.amp.autocast(device_type="cuda", dtype=torch.float16):
            loss = torch.nn.functional.mse_loss(model(self.inputs), self.target)
        loss.backward()
        model.zero_grad()

    def test_training(self):
        optimizer = torch.optim.SGD(self.model.parameters(), lr=0.1)
        loss = self.model(self.inputs).float().mean()
        loss.backward()
        optimizer.step()
""",
            "a backward smoke test the test runner runs: no optimizer steps on its gradients, whatever the file's other tests step",
        ),
        Valid(
            """
import torch


def bench_backward(model, x):
    with torch.autocast("cuda", dtype=torch.float16):
        loss = model(x).sum()
    loss.backward()


def train(model, loader, optimizer):
    for x, y in loader:
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = loss_fn(model(x), y)
        loss.backward()
        optimizer.step()


bench_backward(model, x)
""",
            "the fp16 backward's only caller is a script that never steps; the loop that steps runs bf16",
        ),
        Valid(
            """
import torch
from contextlib import nullcontext
ptdtype = {"float32": torch.float32, "bfloat16": torch.bfloat16}[args.dtype]
ctx = torch.amp.autocast(device_type="cuda", dtype=ptdtype) if args.amp else nullcontext()
for x, y in loader:
    with ctx:
        loss = model(x, y)
    loss.backward()
    optimizer.step()
""",
            "a dtype chosen at run time among literals that do not include float16",
        ),
        Valid(
            """
import argparse
import torch
parser = argparse.ArgumentParser()
parser.add_argument("--dtype", default="bf16", choices=["bf16", "fp32"])
args = parser.parse_args()
DTYPES = {"fp16": torch.float16, "bf16": torch.bfloat16, "fp32": torch.float32}
for x, y in loader:
    with torch.autocast("cuda", dtype=DTYPES[args.dtype]):
        loss = model(x, y)
    loss.backward()
    optimizer.step()
""",
            "the table has an fp16 entry, but the flag's choices never select it",
        ),
        Valid(
            """
import argparse
import torch
parser = argparse.ArgumentParser()
parser.add_argument("--precision", default="float32", choices=["float32", "bfloat16"])
args = parser.parse_args()
for x, y in loader:
    with torch.autocast("cuda", dtype=getattr(torch, args.precision)):
        loss = model(x, y)
    loss.backward()
    optimizer.step()
""",
            "getattr(torch, flag) whose choices include no fp16",
        ),
        Valid(
            """
import argparse
import torch
parser = argparse.ArgumentParser()
parser.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float32"])

def train_one_epoch(model, loader, optimizer, dtype=torch.float16):
    for x, y in loader:
        with torch.autocast("cuda", dtype=dtype):
            loss = model(x, y)
        loss.backward()
        optimizer.step()

args = parser.parse_args()
if args.dtype in ["float16", "fp16"]:
    dtype = torch.float16
elif args.dtype == "bfloat16":
    dtype = torch.bfloat16
else:
    dtype = torch.float32
train_one_epoch(model, loader, optimizer, dtype=dtype)
""",
            "the helper's dtype is what its caller passes: the fp16 branch tests values the flag's choices never hold",
        ),
        Valid(
            """
import torch
def measure_vram(model, batches, sizes):
    results = {}
    for bs in sizes:
        torch.cuda.reset_peak_memory_stats()
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-5)
        for x, y in batches(bs):
            optimizer.zero_grad(set_to_none=True)
            with torch.autocast("cuda", dtype=torch.float16):
                _, loss = model(x, y)
            if loss is not None:
                loss.backward()
                optimizer.step()
        results[bs] = torch.cuda.max_memory_allocated()
        del optimizer
    print(results)


if __name__ == "__main__":
    measure_vram(model, batches, [1, 2, 4, 8])
""",
            "a memory benchmark: nothing it reports or keeps depends on the gradients' values",
        ),
        Valid(
            """
import torch
from contextlib import suppress
def train(probe, loader, optimizer, amp=True):
    autocast = torch.autocast if amp else suppress
    for x, y in loader:
        optimizer.zero_grad()
        with autocast("cuda", dtype=torch.bfloat16):
            loss = torch.nn.functional.cross_entropy(probe(x), y)
        loss.backward()
        optimizer.step()
""",
            "a name holding the autocast callable, called with dtype bf16",
        ),
        Valid(
            """
import torch
from contextlib import suppress
autocast = torch.cuda.amp.autocast


def train(probe, loader, optimizer, autocast=suppress):
    for x, y in loader:
        with autocast():
            loss = probe(x).sum()
        loss.backward()
        optimizer.step()
""",
            "a parameter of the same name shadows the module's autocast: what the caller hands in is unknown",
        ),
        Valid(
            """
import argparse
import contextlib
import torch
parser = argparse.ArgumentParser()
parser.add_argument("--mixed-precision", default="bf16", choices=["fp32", "bf16"])
args = parser.parse_args()
for x, y in loader:
    optimizer.zero_grad()
    with {
        "bf16": torch.autocast("cuda", dtype=torch.bfloat16),
        "fp16": torch.autocast("cuda", dtype=torch.float16),
        "fp32": contextlib.nullcontext(),
    }[args.mixed_precision]:
        loss = model(x, y)
    loss.backward()
    optimizer.step()
""",
            "a context picked from a dict whose fp16 entry the flag's choices never select",
        ),
        Valid(
            """
import argparse
from contextlib import nullcontext
import torch


def train_epoch(loader, optimizer):
    for x, y in loader:
        with autocast_ctx:
            loss = model(x, y)
        loss.backward()
        optimizer.step()


def finetune(loader, optimizer, autocast_ctx):
    for x, y in loader:
        with autocast_ctx:
            loss = model(x, y)
        loss.backward()
        optimizer.step()


if __name__ == "__main__":
    autocast_ctx = nullcontext() if args.cpu else torch.autocast("cuda", dtype=torch.bfloat16)
    train_epoch(loader, torch.optim.AdamW(model.parameters()))
""",
            "the autocast the script binds below its loop is bf16; a parameter of the same name is the caller's context",
        ),
        Valid(
            """
import torch
class Trainer:
    def __init__(self, model, optimizer, config):
        self.model, self.optimizer = model, optimizer
        self.device = torch.device(config["device"])
    def train_epoch(self, loader):
        for x, y in loader:
            with torch.autocast(device_type=self.device.type, dtype=torch.bfloat16):
                loss = self.model(x, y)
            loss.backward()
            self.optimizer.step()
""",
            "an autocast on the run-time device with dtype bf16",
        ),
        Valid(
            """
import torch
def test_fused_matches_reference(x, ref, fused):
    with torch.autocast(x.device.type):
        loss0 = ref(x).sum()
        loss1 = fused(x).sum()
    loss0.backward()
    loss1.backward()
    for p0, p1 in zip(ref.parameters(), fused.parameters()):
        assert torch.allclose(p0.grad, p1.grad)
""",
            "a test comparing gradients on its run-time device: nothing in the file steps an optimizer",
        ),
        Valid(
            """
import torch
class Trainer:
    def __init__(self, model, optimizer, config):
        self.model, self.optimizer = model, optimizer
        self.enable_amp = config["enable_amp"]
        self.enable_scaler = torch.cuda.is_available() and config["enable_amp"]
    def train_epoch(self, loader):
        scaler = torch.amp.GradScaler("cuda", enabled=self.enable_scaler)
        for x, y in loader:
            with torch.autocast("cuda", enabled=self.enable_amp):
                loss = self.model(x, y)
            scaler.scale(loss).backward()
            scaler.step(self.optimizer)
            scaler.update()
""",
            "the GradScaler is switched by the flag that turns the fp16 autocast on",
        ),
        Valid(
            """
import torch
class Trainer:
    def __init__(self, model, optimizer, use_amp, use_scaler):
        self.model, self.optimizer = model, optimizer
        self.use_amp, self.use_scaler = use_amp, use_scaler
        self.scaler = torch.amp.GradScaler("cuda", enabled=use_scaler)
    def train_epoch(self, loader):
        for x, y in loader:
            with torch.autocast("cuda", enabled=self.use_amp):
                loss = self.model(x, y)
            self.scaler.scale(loss).backward()
            self.scaler.step(self.optimizer)
            self.scaler.update()
""",
            "the scaler's switch is a parameter: its caller may pass the autocast's flag",
        ),
        Valid(
            """
import torch
def train(model, loader, optimizer, cfg):
    scaler = torch.amp.GradScaler("cuda", enabled=cfg.amp)
    for x, y in loader:
        with torch.autocast("cuda", enabled=cfg.amp):
            loss = model(x, y)
        if cfg.amp:
            scaler.scale(loss).backward()
        else:
            loss.backward()
        optimizer.step()
""",
            "the unscaled branch is taken only with the autocast's own flag off",
        ),
        Valid(
            """
import torch
def train(model, loader, optimizer, cfg):
    dtype = getattr(torch, cfg.torch_dtype)
    for x, y in loader:
        with torch.autocast("cuda", dtype=dtype, enabled=cfg.amp):
            loss = model(x, y)
        if cfg.amp and cfg.torch_dtype == "float16":
            scaler = torch.amp.GradScaler("cuda")
            scaler.scale(loss).backward()
        else:
            loss.backward()
        optimizer.step()
""",
            "the autocast's dtype follows the dtype the fork tests: bf16 on the unscaled branch",
        ),
    ]

    INVALID = [
        Invalid(
            """
import pytest
import torch


def test_fp16_training_converges():
    model, optimizer = Net().cuda(), torch.optim.AdamW(Net().parameters())
    for x, y in loader:
        with torch.autocast("cuda", dtype=torch.float16):
            loss = criterion(model(x), y)
        loss.backward()
        optimizer.step()
""",
            line=10,
            why="a test that steps an optimizer itself: the fp16 gradients it updates with may underflow",
        ),
        Invalid(
            """
import contextlib
import torch
import torch.multiprocessing as mp


class TestBlocks:
    def test_blocks(self):
        with_amp = True
        self._run_loop(with_fsdp=True, with_amp=with_amp)

    def test_head(self):
        self._run_loop(with_fsdp=True, with_amp=False)

    @classmethod
    def _run_loop(cls, with_fsdp, with_amp):
        mp.spawn(cls._worker, (with_fsdp, with_amp), nprocs=2)

    @staticmethod
    def _worker(gpu_id, with_fsdp, with_amp):
        model, optimizer = build(with_fsdp)
        for batch in loader:
            context = contextlib.suppress()
            if with_amp:
                context = torch.cuda.amp.autocast()
            with context:
                loss = model(batch).mean()
            loss.backward()
            optimizer.step()
""",
            line=27,
            why="one test spawns the worker with with_amp on: its fp16 backward is unscaled",
        ),
        Invalid(
            """
import torch
import torch.nn.functional as F


def loss_step(batch, unet, mixed_precision=False):
    if mixed_precision:
        with torch.cuda.amp.autocast():
            pred = unet(batch["x"])
    else:
        pred = unet(batch["x"])
    loss = F.mse_loss(pred.float(), batch["y"].float())
    return loss


def perform_tuning(unet, loader, optimizer):
    for batch in loader:
        loss = loss_step(batch, unet, mixed_precision=True)
        loss.backward()
        optimizer.step()
""",
            line=18,
            why="the helper's loss comes from a prediction made under fp16 autocast, which this call switches on",
        ),
        Invalid(
            """
import torch
for x, y in loader:
    with torch.autocast("cuda", dtype=torch.float16):
        loss = loss_fn(model(x), y)
    loss.backward()
    optimizer.step()
    optimizer.zero_grad()
""",
            line=5,
        ),
        Invalid(
            """
import argparse
import torch
parser = argparse.ArgumentParser()
parser.add_argument("--dtype", default="bf16", choices=["fp16", "bf16"])
args = parser.parse_args()
DTYPES = {"fp16": torch.float16, "bf16": torch.bfloat16, "fp32": torch.float32}
for x, y in loader:
    with torch.autocast("cuda", dtype=DTYPES[args.dtype]):
        loss = model(x, y)
    loss.backward()
    optimizer.step()
""",
            line=10,
            why="the default is bf16, but --dtype fp16 is a supported choice and on it nothing scales the loss",
        ),
        Invalid(
            """
import argparse
import torch
parser = argparse.ArgumentParser()
parser.add_argument("--precision", default="bfloat16", choices=["float16", "bfloat16"])
args = parser.parse_args()
for x, y in loader:
    with torch.autocast("cuda", dtype=getattr(torch, args.precision)):
        loss = model(x, y)
    loss.backward()
    optimizer.step()
""",
            line=9,
            why="getattr(torch, flag): the flag's literal choices include float16",
        ),
        Invalid(
            """
import argparse
import torch
parser = argparse.ArgumentParser()
parser.add_argument("--dtype", default="bfloat16", choices=["float16", "bfloat16", "float32"])

def train_one_epoch(model, loader, optimizer, dtype=torch.float16):
    for x, y in loader:
        with torch.autocast("cuda", dtype=dtype, enabled=dtype != torch.float32):
            loss = model(x, y)
        loss.backward()
        optimizer.step()

args = parser.parse_args()
if args.dtype in ["float16", "fp16"]:
    dtype = torch.float16
elif args.dtype == "bfloat16":
    dtype = torch.bfloat16
else:
    dtype = torch.float32
train_one_epoch(model, loader, optimizer, dtype=dtype)
""",
            line=10,
            why="the helper's dtype is what its one caller passes, and --dtype float16 selects the fp16 branch",
        ),
        Invalid(
            """
from torch.cuda.amp import autocast

class Trainer:
    def compute_loss(self, batch):
        with autocast():
            outputs = self.model(**batch)
        return outputs.loss

    def training_step(self, batch):
        loss = self.compute_loss(batch) / self.accum
        loss.backward()
""",
            line=11,
            why="HF-style trainer: the loss comes back from an fp16 helper",
        ),
        Invalid(
            """
import torch as T
def train(model, loader, optimizer, args):
    for step, (x, y) in enumerate(loader):
        with T.amp.autocast("cuda", enabled=args.amp):
            logits = model(x)
        loss = T.nn.functional.cross_entropy(logits, y) / args.accum
        (loss / 2).backward()
        if (step + 1) % args.accum == 0:
            optimizer.step()
            optimizer.zero_grad()
""",
            line=7,
            why="loss built from fp16 activations; enabled decided at run time",
        ),
        Invalid(
            """
import torch
with torch.autocast("cpu", dtype=torch.float16):
    out = model(x)
    loss = out.float().pow(2).mean()
torch.autograd.backward(loss)
optimizer.step()
""",
            line=5,
        ),
        Invalid(
            """
import torch
from torch.cuda.amp import autocast

def gan_step(gen, disc, opt_g, opt_d, real, z):
    with autocast():
        fake = gen(z)
        loss_d = disc_loss(disc(real), disc(fake.detach()))
    opt_d.zero_grad()
    loss_d.backward()
    opt_d.step()
    with autocast():
        loss_g = gen_loss(disc(fake))
    opt_g.zero_grad()
    loss_g.backward()
    opt_g.step()
""",
            line=9,
            count=2,
            why="a GAN step: both backward passes run through fp16 without loss scaling",
        ),
        Invalid(
            """
import torch
from contextlib import nullcontext
dtype = "bfloat16" if torch.cuda.is_bf16_supported() else "float16"
ptdtype = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}[dtype]
ctx = nullcontext() if device_type == "cpu" else torch.amp.autocast(device_type=device_type, dtype=ptdtype)


def train(model, optimizer, loader):
    for x, y in loader:
        with ctx:
            logits, loss = model(x, y)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
""",
            line=13,
            why="the dtype is picked at run time from a table that offers float16: on that path nothing scales the loss",
        ),
        Invalid(
            """
import torch
def train(model, optimizer, loader, device, accum):
    for x, y in loader:
        with torch.autocast(device.type, dtype=torch.bfloat16 if device.type == "cuda" else torch.float16):
            _, loss = model(x, y)
        if accum > 1:
            loss = loss / accum
        loss.backward()
        optimizer.step()
""",
            line=8,
            why="the loss rescaled under an `if` before the backward is still the fp16 region's (fp16 on MPS)",
        ),
        Invalid(
            """
import time
import torch
def bench(model, optimizer, x, y, steps):
    t0 = time.perf_counter()
    for k in range(steps):
        with torch.autocast("cuda", dtype=torch.float16):
            loss = model(x, y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        print(f"{k}/{steps} loss: {loss.item():.4f}")
    print(time.perf_counter() - t0)


bench(model, optimizer, x, y, 20)
""",
            line=9,
            why="a speed benchmark that reports the loss it trains: underflowed updates change what it prints",
        ),
        Invalid(
            """
import torch
def profile_memory(model, optimizer, loader):
    torch.cuda.reset_peak_memory_stats()
    for x, y in loader:
        with torch.autocast("cuda", dtype=torch.float16):
            loss = model(x, y)
        loss.backward()
        optimizer.step()
    print(torch.cuda.max_memory_allocated())
    torch.save(model.state_dict(), "after.pt")


profile_memory(model, optimizer, loader)
""",
            line=7,
            why="it measures memory, but keeps the model it trained",
        ),
        Invalid(
            """
import torch
from contextlib import suppress
def train_probe(probe, loader, optimizer, epochs, amp=True):
    autocast = torch.cuda.amp.autocast if amp else suppress
    for epoch in range(epochs):
        for x, y in loader:
            optimizer.zero_grad()
            with autocast():
                loss = torch.nn.functional.cross_entropy(probe(x), y)
            loss.backward()
            optimizer.step()
""",
            line=10,
            why="a name holding the autocast callable (or `suppress` when amp is off): `autocast()` is CUDA's fp16 autocast",
        ),
        Invalid(
            """
import argparse
import contextlib
import torch
parser = argparse.ArgumentParser()
parser.add_argument("--mixed-precision", default="bf16", choices=["fp32", "fp16", "bf16"])
args = parser.parse_args()
for x, y in loader:
    optimizer.zero_grad()
    with {
        "bf16": torch.autocast("cuda", dtype=torch.bfloat16),
        "fp16": torch.autocast("cuda", dtype=torch.float16),
        "fp32": contextlib.nullcontext(),
    }[args.mixed_precision]:
        loss = model(x, y)
    loss.backward()
    optimizer.step()
""",
            line=15,
            why="the context is picked from a dict by --mixed-precision; its fp16 choice autocasts to fp16 and nothing scales the loss",
        ),
        Invalid(
            """
import torch


def forward_backward(model, batch):
    with torch.autocast("cuda", dtype=torch.float16):
        loss = model(batch).mean()
    loss.backward()


def train(model, loader, optimizer):
    for batch in loader:
        optimizer.zero_grad()
        forward_backward(model, batch)
        optimizer.step()
""",
            line=7,
            why="the loop that calls the helper steps the optimizer: the underflowed gradients are applied",
        ),
        Invalid(
            """
import torch


class Trainer:
    def run(self, batch):
        with torch.autocast("cuda", dtype=torch.float16):
            loss = self.model(batch).mean()
        loss.backward()
        self.apply_update()

    def apply_update(self):
        self.optimizer.step()
""",
            line=8,
            why="the method it calls steps the optimizer",
        ),
        Invalid(
            """
import argparse
from contextlib import nullcontext
import torch


def train_epoch(loader, optimizer):
    for x, y in loader:
        with autocast_ctx:
            out = model(x)
            aux_loss = out.aux_loss
        loss = (out.loss + aux_loss) / 2
        loss.backward()
        optimizer.step()


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--dtype", type=str, default="bfloat16")
    args = parser.parse_args()
    dtype = torch.bfloat16 if args.dtype == "bfloat16" else torch.float16
    autocast_ctx = nullcontext() if args.device == "cpu" else torch.cuda.amp.autocast(dtype=dtype)
    train_epoch(loader, torch.optim.AdamW(model.parameters()))
""",
            line=12,
            why="the script binds its autocast below the loop that reads it (the loop runs after); --dtype other than bfloat16 makes it fp16",
        ),
        Invalid(
            """
import torch
class Trainer:
    def __init__(self, model, optimizer, config):
        self.model, self.optimizer = model, optimizer
        self.device = torch.device(config["device"])
    def train_epoch(self, loader):
        for x, y in loader:
            with torch.autocast(device_type=self.device.type):
                loss = self.model(x, y)
            loss.backward()
            self.optimizer.step()
""",
            line=10,
            why="no dtype on the run-time device: fp16 on a CUDA device, and nothing scales the loss",
        ),
        Invalid(
            """
import torch
class Trainer:
    def __init__(self, model, optimizer, config):
        self.model, self.optimizer = model, optimizer
        self.enable_amp = config["enable_amp"]
        self.enable_scaler = torch.cuda.is_available() and config["enable_scaler"]
    def train_epoch(self, loader):
        scaler = torch.amp.GradScaler("cuda", enabled=self.enable_scaler)
        for x, y in loader:
            with torch.autocast("cuda", enabled=self.enable_amp):
                loss = self.model(x, y)
            scaler.scale(loss).backward()
            scaler.step(self.optimizer)
            scaler.update()
""",
            line=12,
            why="the GradScaler has a switch of its own: with enable_amp on and enable_scaler off the fp16 loss is not scaled",
        ),
        Invalid(
            """
import torch
def train(model, loader, optimizer, cfg):
    for x, y in loader:
        with torch.autocast("cuda", enabled=cfg.mixed_precision):
            loss = model(x, y)
        if cfg.mixed_precision and cfg.model_dtype == "float16":
            scaler = torch.amp.GradScaler("cuda")
            scaler.scale(loss).backward()
        else:
            loss.backward()
        optimizer.step()
""",
            line=10,
            why="no dtype: fp16 autocast on CUDA even for a bf16 model, whose branch backpropagates unscaled",
        ),
    ]

    def check(self, ctx: ModuleContext) -> Iterator[Diagnostic]:
        from amplint.model import update_reachable

        flags = _own_flag_scalers(ctx) if ctx.scalers else None
        if ctx.scalers and flags is None:
            yield from self._dtype_forks(ctx)
            return
        if flags is None and _mentions_scaling(ctx):
            return
        if not any(_is_fp16(ctx, r) for r in ctx.regions):
            return
        for scope in ctx.scopes:
            for event in scope.events:
                if event.kind != ("backward" if flags is None else "scaled_backward"):
                    continue
                if not update_reachable(ctx, scope, event):
                    continue  # no optimizer steps on these gradients (a benchmark, a gradient check): no update to lose
                loss = _loss_expression(event.call) if flags is None else _scaled_loss(ctx, scope, event)
                if loss is None:
                    continue
                source = _fp16_source(ctx, scope, event, loss)
                if source is None or _measures_only(ctx, scope, loss):
                    continue
                if _region_off_everywhere(ctx, source):
                    continue  # `if with_amp:` around the autocast, and every run the file shows passes it off
                if flags is None:
                    yield self._diagnostic(ctx, event, loss, source)
                    continue
                # a GradScaler switched by a flag of its own: only a region switched by other flags counts
                switch = _region_flags(ctx, source)
                scaler_flags = flags.get(event.scaler or "")
                if switch and scaler_flags and not (_leaves(switch[1]) & _leaves(scaler_flags[1])):
                    yield self._diagnostic(ctx, event, loss, source, (switch[0], scaler_flags[0]))

    def _dtype_forks(self, ctx: ModuleContext) -> Iterator[Diagnostic]:
        """A file with GradScalers: the unscaled `loss.backward()` in the `else` of an `if` whose body
        runs `scaler.scale(loss).backward()` on the same loss, where the test is (or is a conjunct of)
        a dtype test for fp16 (`cfg.torch_dtype == "float16"`) that the region does not read: the
        region is fp16 whatever that dtype is (no `dtype=` on CUDA, or `dtype=torch.float16`), so
        when the test is false the fp16 loss is backpropagated unscaled."""
        from amplint.model import update_reachable

        if not any(r.dtype == "fp16" and _is_fp16(ctx, r) for r in ctx.regions):
            return
        for scope in ctx.scopes:
            for event in scope.events:
                if event.kind != "backward":
                    continue
                fork = _scaled_fork(scope, event)
                if fork is None:
                    continue
                loss = _loss_expression(event.call)
                scaled = next((_scaled_loss(ctx, scope, e) for e in fork), None)
                if loss is None or scaled is None or ctx.code_for(loss).strip() != ctx.code_for(scaled).strip():
                    continue
                if not update_reachable(ctx, scope, event):
                    continue
                source = _fp16_source(ctx, scope, event, loss)
                if source is None or source.dtype != "fp16" or _measures_only(ctx, scope, loss):
                    continue
                if _region_off_everywhere(ctx, source):
                    continue
                switch = _region_flags(ctx, source)
                if switch is None and source.enabled is not True:
                    continue  # switched by something the flags cannot name (a parameter): what is on is unknown
                test = _fp16_dtype_test(ctx, _fork_test(event), _leaves(switch[1]) if switch else set())
                if test is not None:
                    yield self._diagnostic(ctx, event, loss, source, dtype_test=test)

    def check_project(self, project: Any) -> Iterator[Diagnostic]:
        """A backward without loss scaling, with an optimizer step after it, on a model wrapped by
        FSDP with an fp16 mixed-precision policy (`param_dtype=torch.float16`), read across files
        (the scale view): the policy itself, or an fp16 policy a helper falls back to when a bf16
        capability probe fails (`torch.cuda.is_bf16_supported()`). Any other run-time choice of
        the policy is left alone."""
        from amplint.model import scale_project_diagnostics

        yield from scale_project_diagnostics(self, project, _fsdp_fp16_backwards)

    def _diagnostic(
        self, ctx: ModuleContext, event: Event, loss: cst.BaseExpression, region: AutocastRegion,
        switches: Optional[tuple] = None, dtype_test: Optional[str] = None,
    ) -> Diagnostic:
        from amplint.model import DTYPE_PROPERTY, region_choice_naming

        row = ctx.position(region.call)[0].row
        text = ctx.code_for(loss).strip()
        choice = region_choice_naming(ctx, region, "fp16") if region.dtype is None else None
        prop = _dtype_property(ctx, region) if region.dtype is None and choice is None else None
        condition = f"{DTYPE_PROPERTY}={prop[1]}" if prop is not None else None
        if dtype_test is not None:  # the scaled branch is taken on a dtype test the fp16 region does not read
            message = f"`{_short(text, 12)}` from fp16 autocast is unscaled unless `{_short(dtype_test, 40)}`"
        elif switches is not None:  # the scaler is switched by a flag the autocast does not read
            kind = "fp16 autocast" if region.dtype == "fp16" else "possibly-fp16 autocast"
            for on, off in (switches, [min(_leaves({w}), key=len) for w in switches]):
                # the switches as written, or (over 100 characters) the flags they end in
                message = (f"`{_short(text, 12)}` from {kind} is unscaled with `{_short(on, 24)}` on, "
                           f"`{_short(off, 24)}` off")
                if len(message) < 100:
                    break
        elif region.dtype == "fp16":
            message = f"`{_short(text)}` comes from fp16 autocast and is backpropagated without a GradScaler"
        elif prop is not None:  # a config's property maps its precision to a dtype, fp16 one of them
            spelled = prop[0][len("self."):] if prop[0].startswith("self.") and prop[0].count(".") > 1 else prop[0]
            message = f"when `{_short(spelled, 26)}` is float16: `{_short(text, 12)}` is backpropagated without a GradScaler"
        elif choice is not None:  # an argparse option's literal choice selects fp16
            message = f"when {choice}: `{_short(text, 16)}` from fp16 autocast is backpropagated without a GradScaler"
        else:  # a run-time choice among literal dtypes, float16 one of them
            message = f"`{_short(text)}` comes from an autocast that may be fp16, backpropagated without a GradScaler"
        data = {"loss": text, "region_row": row, "device": region.device, "dtype": "fp16"}
        source = _region_through_backward(ctx, region, event)
        if source:  # the user's own statements, for `--verify` to run
            data["step_source"] = source
        help = "Scale the loss with `torch.amp.GradScaler`, or autocast to bf16"
        if switches is not None:
            help = "Enable the GradScaler whenever the fp16 autocast is on (the same flag), or autocast to bf16"
        if dtype_test is not None:
            help = "The autocast is fp16 whatever that dtype is: pass it as the autocast's dtype, or always scale"
        return ctx.diagnostic(self, event.call.node, message, data=data, help=help, condition=condition)


#: what a helper probing for bf16 support calls (`torch.cuda.is_bf16_supported()`)
_BF16_PROBES = ("is_bf16_supported",)
#: methods a training function calls on the model it trains
_MODEL_METHODS = ("parameters", "train", "clip_grad_norm_", "zero_grad", "named_parameters", "forward")


def _fsdp_fp16_backwards(view: ScaleView) -> Iterator[ScaleFinding]:
    """The project half (`check_project`): one finding per backward (`_fp16_policy`)."""
    from amplint.model import ScaleFinding

    for path, e in view.events("back"):
        s = view.summary(path)
        if s is None or e.get("scaled") or "scal" in (e.get("recv") or "").lower():
            continue
        func = e["f"]
        cls = view._class_of(path, func)
        funcs = [q for q in s["functions"] if q.startswith(f"{cls}.")] if cls else [func]
        if not view._ensure(path) or not any(
            ev["e"] == "step" and ev["f"] in funcs and ev.get("recv") and view.project._optimizer_name((path, ev["f"]), ev["recv"])
            for ev in s["events"]
        ):
            continue  # no optimizer update within reach: a benchmark, a gradient check
        if any(ev["e"] == "ctor" and ev["k"] == "scaler" for ev in s["events"]):
            continue
        if any("scaler" in u.lower() or "scale_loss" in u for q in funcs for u in s["uses"].get(q, ())):
            continue
        info = view.project.function((path, func))
        if info is not None and any("scaler" in p.lower() for p in info["params"]):
            continue
        found = _fp16_policy(view, path, func, e)
        if found is None:
            continue
        w, policy, fallback = found
        recv = e.get("recv") or "loss"
        name = (view.event_at(policy.place[0], policy.place[1], policy.place[2]) or {}).get("t") or ["MixedPrecision(...)"]
        spelled = name[0] or "MixedPrecision(...)"
        if fallback:
            message = f"On GPUs without bf16, `{_short(recv, 12)}` runs backward in the fp16 FSDP policy `{_short(spelled, 12)}`, unscaled"
        else:
            message = f"`{_short(recv, 16)}` runs backward in the fp16 FSDP policy `{_short(spelled, 20)}` without loss scaling"
        related = [(w.place, "wrapped by FSDP here"), (policy.place, "its fp16 mixed-precision policy")]
        if fallback:
            related.append((fallback, "falls back to the fp16 policy when bf16 is not supported"))
        if w.kind == "fsdp1":
            help = ("Scale the loss with `ShardedGradScaler` on the fp16 policy (`scaler.scale(loss).backward()`, "
                    "`scaler.step(optimizer)`), or refuse to train without bf16")
        else:  # `fully_shard`'s gradients are DTensors, which the plain GradScaler handles
            help = ("Scale the loss with `torch.amp.GradScaler` on the fp16 policy (`scaler.scale(loss).backward()`, "
                    "`scaler.step(optimizer)`), or refuse to train without bf16")
        data = {"loss": recv, "dtype": "fp16", "device": "cuda", "wrapper": w.kind, "fp16_from": "fsdp-policy",
                "fallback": bool(fallback), "wrapper_site": [w.path, w.event["r"]]}
        yield ScaleFinding(view.place(path, e), message, help, related, data)


def _fp16_policy(view: ScaleView, path: str, func: str, back: Dict[str, Any]) -> Optional[Any]:
    """(wrapper, fp16 policy, where the fallback is chosen or None) for the FSDP model a training
    function backpropagates through: a model it calls, takes the parameters of or clips, or one
    the loss is computed from. The policy is fp16 outright, or one of a helper's choices where that
    helper probes bf16 support (every other choice bf16 or fp32); None otherwise."""
    s = view.summary(path)
    names: List[str] = []
    for spelled in s["uses"].get(func, ()):
        head, _, method = spelled.rpartition(".")
        name = head if method in _MODEL_METHODS else spelled
        if name and "." not in name and name not in names and name not in ("torch", "nn", "F"):
            names.append(name)
    deps, _ = view.deps(path, func, back.get("recv") or "")
    names += [n for n in sorted(deps) if "." not in n and n not in names]
    for name in names:
        for w in view.wrappers(path, func, name):
            if w.kind not in ("fsdp1", "fsdp2"):
                continue
            policies, choosers = view.policy_choices(w.path, w.event["f"], w.event.get("mp"))
            fp16 = [p for p in policies if p.param == "fp16"]
            if not fp16 or any(p.param not in ("fp16", "bf16", "fp32") for p in policies):
                continue
            if len(policies) == 1:
                return w, fp16[0], None
            probe = _bf16_probe(view, choosers)
            if probe is not None:
                return w, fp16[0], probe
    return None


def _bf16_probe(view: ScaleView, choosers: List[Any]) -> Optional[Any]:
    """The place of a function among `choosers` (those binding the policy more than one way) that
    calls a bf16 capability probe; None when none does."""
    for path, func in choosers:
        info = view.project.function((path, func)) if view._ensure(path) else None
        if info is None:
            continue
        for record in info["calls"]:
            if record["f"].rsplit(".", 1)[-1] in _BF16_PROBES:
                return (path, record["r"], record["c"], record["er"], record["ec"])
    return None


def _short(text: str, limit: int = 30) -> str:
    """An expression as a message names it: one line, at most `limit` characters."""
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _region_through_backward(ctx: ModuleContext, region: AutocastRegion, event: Event) -> Optional[str]:
    """The lines from the region's `with` through the backward, when both are in one function
    and the `with` comes first (else None: the loss comes from elsewhere, e.g. a helper)."""
    import libcst as cst

    from amplint.model import lines_between

    if not isinstance(region.node, cst.With):
        return None
    try:
        start, _ = ctx.position(region.node)
        at, _ = ctx.position(event.call.statement)
    except KeyError:
        return None
    if start.row >= at.row or at.row - start.row > 60:
        return None
    scope = event.call.scope
    if scope is None or not any(c.node is region.call and c.scope is scope for c in ctx.calls):
        return None
    return lines_between(ctx, region.node, event.call.statement) or None


def _is_fp16(ctx: ModuleContext, region: Optional[AutocastRegion]) -> bool:
    """An fp16 region: `dtype=torch.float16` (or the device's default), a dtype picked at
    run time among literal candidates that include float16 (`{..., 'float16': torch.float16}[dtype]`),
    or no dtype on a device decided at run time (`torch.autocast(device_type=device.type)`: CUDA's
    default is float16)."""
    from amplint.model import region_dtype_choices

    if region is None or region.framework or region.enabled is False:
        return False
    if region.dtype == "fp16" or "fp16" in region_dtype_choices(ctx, region):
        return True
    return _dtype_property(ctx, region) is not None or (_runtime_device_default(region) and _file_steps(ctx))


def _dtype_property(ctx: ModuleContext, region: AutocastRegion) -> Optional[tuple]:
    """(the `dtype=` as written, what the project condition reads) for a region whose dtype is a
    config object's property or method read here (`dtype=self.cfg.autocast_precision`,
    `dtype=cfg.amp_dtype()`), with no literal candidate in this file: the property's file maps
    the configured precision to a dtype (`dtype_properties.py`), which the condition
    `dtype-property=autocast_precision` checks across the project. None otherwise."""
    import libcst as cst

    from amplint.model import autocast_parameters, call_arg, dotted_name, region_dtype_choices

    if region.dtype is not None or region.selector is not None or region.qualname is None or region_dtype_choices(ctx, region):
        return None
    parameters = autocast_parameters(region.qualname)
    node = call_arg(region.call, parameters.index("dtype"), "dtype") if "dtype" in parameters else None
    called = isinstance(node, cst.Call)
    if called:
        if node.args or not isinstance(node.func, cst.Attribute):
            return None
        node = node.func
    if not isinstance(node, cst.Attribute):
        return None
    spelled = dotted_name(node)
    if spelled is None:
        return None
    root = spelled.split(".", 1)[0]
    if ctx.imports.is_imported(root):
        return None  # a module's function or constant (`torch.get_autocast_gpu_dtype()`), not a config's
    name = node.attr.value + ("()" if called else "")
    return ctx.code_for(node).strip() + ("()" if called else ""), name


def _file_steps(ctx: ModuleContext) -> bool:
    """Whether the file itself steps an optimizer (`optimizer.step()`, `scaler.step(optimizer)`):
    a region on a run-time device counts only in a training file, not in a test comparing the
    gradients of two implementations on whatever device the test runs."""
    return any(e.kind in ("optimizer_step", "scaler_step") for s in ctx.scopes for e in s.events)


def _runtime_device_default(region: AutocastRegion) -> bool:
    """`torch.autocast(device_type=x.device.type)` with no dtype: on a CUDA device (the one a
    training run picks when it has one) that is float16."""
    from amplint.model import autocast_parameters, call_arg

    if region.device is not None or region.dtype is not None or region.selector is not None or region.qualname is None:
        return False
    parameters = autocast_parameters(region.qualname)
    if "device_type" not in parameters or "dtype" not in parameters:
        return False
    device = call_arg(region.call, parameters.index("device_type"), "device_type")
    if device is None or call_arg(region.call, parameters.index("dtype"), "dtype") is not None:
        return False
    # a device's type read at run time (`self.device.type`, `x.device.type`), not a name that may hold "cpu"
    return _dotted(device).endswith("device.type")


def _dotted(expr: cst.BaseExpression) -> str:
    from amplint.model import dotted_name

    return dotted_name(expr) or ""


@functools.lru_cache(maxsize=None)
def _flag_atoms_visitor() -> type:
    """The visitor collecting the flag spellings of one switch expression for `_flag_atoms`, made once
    (libcst imported only when the per-file check runs; a class defined per call would be a new,
    cyclic class object per call, holding the file's context in its closure)."""
    import libcst as cst

    class _FlagAtoms(cst.CSTVisitor):
        def __init__(self, ctx: ModuleContext, atoms: Set[str]) -> None:
            super().__init__()
            self.ctx, self.atoms = ctx, atoms

        def visit_Call(self, node: cst.Call) -> bool:
            for a in node.args:
                a.value.visit(self)
            return False

        def visit_Subscript(self, node: cst.Subscript) -> bool:
            self.atoms.add(self.ctx.code_for(node).strip())
            return False

        def visit_Attribute(self, node: cst.Attribute) -> bool:
            self.atoms.add(self.ctx.code_for(node).strip())
            return False

        def visit_Name(self, node: cst.Name) -> bool:
            if node.value not in ("True", "False", "None") and not self.ctx.imports.is_imported(node.value):
                self.atoms.add(node.value)
            return False

    return _FlagAtoms


def _flag_atoms(ctx: ModuleContext, expr: cst.BaseExpression, depth: int = 3) -> Optional[Set[str]]:
    """The run-time flags a switch reads (`args.amp`, `self.enable_scaler`, `config["enable_amp"]`),
    followed through the file's assignments to them (`self.enable_amp = config["enable_amp"]`).
    Calls (a device probe such as `torch.cuda.is_available()`) are not flags. None when it reads
    a function's parameter (`self.use_scaler = use_scaler`): the caller may hand in the other switch."""
    atoms: Set[str] = set()
    expr.visit(_flag_atoms_visitor()(ctx, atoms))
    if atoms & {p for s in ctx.scopes for p in s.params}:
        return None  # a parameter: what the caller hands in (perhaps the other switch) is unknown
    if depth > 0:
        for atom in list(atoms):
            for a in ctx.assignments:
                if a.target == atom and not a.unpacked and a.value is not None:
                    more = _flag_atoms(ctx, a.value, depth - 1)
                    if more is None:
                        return None
                    atoms |= more
    return atoms


def _leaves(flags: Set[str]) -> Set[str]:
    """The names flags end in (`fp16` of `self.args.fp16` and of `args.fp16`, `enable_amp` of
    `config["enable_amp"]`): one flag read through two spellings is one switch."""
    return {re.split(r"[.\[]", f.rstrip("]").strip())[-1].strip("'\"") for f in flags}


def _own_flag_scalers(ctx: ModuleContext) -> Optional[Dict[str, tuple]]:
    """scaler key -> (the `enabled=` text, its flags) when every GradScaler of the file is built
    with an `enabled=` that reads run-time flags (`GradScaler(enabled=self.enable_scaler)`), and the
    file mentions no other loss scaling; None otherwise (any scaler it may use unconditionally)."""
    from amplint.model import scaler_enabled_argument

    out: Dict[str, tuple] = {}
    for key, info in ctx.scalers.items():
        if info.is_parameter or not info.constructors or info.enabled is not None:
            return None
        texts, flags = set(), set()
        for ctor in info.constructors:
            node = scaler_enabled_argument(ctor)
            if node is None:
                return None
            texts.add(ctx.code_for(node).strip())
            read = _flag_atoms(ctx, node)
            if read is None:
                return None
            flags |= read
        if len(texts) != 1 or not flags:
            return None
        out[key] = (texts.pop(), flags)
    # any other scaling the file spells (a `loss_scaler`, apex's `amp.scale_loss`, a scaler parameter)
    built = {id(c.node) for info in ctx.scalers.values() for c in info.constructors}
    names = [c.dotted or "" for c in ctx.calls if id(c.node) not in built] + [p for s in ctx.scopes for p in s.params]
    for n in names:
        if any(n == k or n.startswith(k + ".") for k in out):
            continue
        if "scale_loss" in n or "scaler" in n.lower():
            return None
    return out


def _region_flags(ctx: ModuleContext, region: AutocastRegion) -> Optional[tuple]:
    """(the region's `enabled=` text, the flags its `enabled=` and `dtype=` read) when it is
    switched at run time; None when it is always on (then the scaler's own flag is the switch)."""
    from amplint.model import autocast_parameters, call_arg, enabled_argument

    if region.enabled is not None or region.qualname is None:
        return None
    parameters = autocast_parameters(region.qualname)
    enabled = enabled_argument(ctx, region)
    if enabled is None:
        return None
    flags = _flag_atoms(ctx, enabled)
    dtype = call_arg(region.call, parameters.index("dtype") if "dtype" in parameters else None, "dtype")
    read = _flag_atoms(ctx, dtype) if dtype is not None else set()
    if flags is None or read is None:
        return None
    flags |= read
    return (ctx.code_for(enabled).strip(), flags) if flags else None


def _scaled_fork(scope: Scope, event: Event) -> Optional[List[Event]]:
    """The scaled backwards (`scaler.scale(loss).backward()`) in the body of the `if` whose `else`
    holds this backward, that `else` being the backward's innermost branch; None otherwise."""
    frames = [i for i, f in enumerate(event.path) if f.kind in ("if", "else")]
    if not frames or event.path[frames[-1]].kind != "else":
        return None
    node = event.path[frames[-1]].node
    fork = [e for e in scope.events if e.kind == "scaled_backward"
            and any(f.kind == "if" and f.node is node for f in e.path)]
    return fork or None


def _fork_test(event: Event) -> cst.BaseExpression:
    """The test of the `if` whose `else` holds the backward (see `_scaled_fork`)."""
    return [f for f in event.path if f.kind in ("if", "else")][-1].test


#: how a dtype test spells fp16: `== "float16"`, `== torch.float16`, `in ("fp16", "float16")`
_FP16_SPELLINGS = frozenset(("float16", "fp16", "half", "torch.float16", "torch.half"))


def _fp16_dtype_test(ctx: ModuleContext, test: cst.BaseExpression, region_flags: Set[str]) -> Optional[str]:
    """The text of the test, or of the conjunct of an `and` test, comparing a run-time value with
    fp16 (`cfg.train_model.torch_dtype == "float16"`, `dtype is torch.float16`) whose flags are
    none of the region's switch (`region_flags`, their leaves): when it is false the region may
    still be on. None when there is none (an `or` test, a test of the autocast's own flag)."""
    import libcst as cst

    conjuncts, todo = [], [test]
    while todo:
        node = todo.pop()
        if isinstance(node, cst.BooleanOperation) and isinstance(node.operator, cst.And):
            todo += [node.right, node.left]
        else:
            conjuncts.append(node)
    for node in conjuncts:
        if not isinstance(node, cst.Comparison) or len(node.comparisons) != 1:
            continue
        target = node.comparisons[0]
        if not isinstance(target.operator, (cst.Equal, cst.Is, cst.In)):
            continue
        if isinstance(target.operator, cst.In):
            if not isinstance(target.comparator, (cst.Tuple, cst.List, cst.Set)):
                continue
            values = [e.value for e in target.comparator.elements]
        else:
            values = [target.comparator]
        spelled = {_literal_text(ctx, v) for v in values}
        if not spelled & _FP16_SPELLINGS:
            continue
        flags = _flag_atoms(ctx, node.left)
        if not flags or _leaves(flags) & region_flags:
            continue
        return ctx.code_for(node).strip()
    return None


def _literal_text(ctx: ModuleContext, node: cst.BaseExpression) -> str:
    import libcst as cst

    if isinstance(node, cst.SimpleString):
        return node.evaluated_value if isinstance(node.evaluated_value, str) else ""
    return _dotted(node)


def _scaled_loss(ctx: ModuleContext, scope: Scope, event: Event) -> Optional[cst.BaseExpression]:
    """The loss a `scaler.scale(loss).backward()` (or `scaled = scaler.scale(loss)`) backpropagates."""
    import libcst as cst

    inner = event.call.receiver
    if not isinstance(inner, cst.Call):
        a = _last_assignment(ctx, scope, event.call.receiver_dotted or "", event.order, event.path)
        inner = a.value if a is not None else None
    if isinstance(inner, cst.Call) and inner.args:
        return inner.args[0].value
    return None


#: calls that measure a step rather than train with it: CUDA's memory statistics, timing events,
#: torch's benchmark and profiler modules, wall clocks
_MEASURING_PREFIXES = ("torch.utils.benchmark.", "torch.profiler.", "timeit.")
_MEASURING_CALLS = frozenset((
    "torch.cuda.Event", "torch.cuda.synchronize", "time.perf_counter", "time.perf_counter_ns", "time.time",
    "time.monotonic", "time.process_time",
))
#: what a call that keeps the trained model or its state is named (`torch.save`, `save_pretrained`,
#: `save_checkpoint`, `model.state_dict()`, `push_to_hub`, `torch.onnx.export`)
_KEEPING_WORDS = ("save", "checkpoint", "state_dict", "push_to_hub", "export")


def _measures_only(ctx: ModuleContext, scope: Scope, loss: cst.BaseExpression) -> bool:
    """A benchmark whose updates reach nothing it reports: the file's own script code (module
    level, or a plain function the file calls) measures memory or time, nothing in the file keeps
    the model (no save, no `state_dict`, no export), the function returns no value, and the loss
    (with what its statement unpacks beside it) is never read as a value: it only feeds
    `backward()`, `is None` tests and `del`. A VRAM or speed benchmark that steps a throwaway
    optimizer reports the same numbers whether fp16 gradients underflow or not; one that prints
    the loss it trains reports what underflow changes, and keeps its finding."""
    if not scope.is_module and (scope.cls is not None or not ctx.callers(scope)):
        return False
    measures = False
    for call in ctx.calls:
        names = [call.dotted or "", call.method or ""] + list(call.qualnames)
        if any(w in n.lower() for n in names for w in _KEEPING_WORDS):
            return False
        if not measures:
            measures = call.method == "elapsed_time" or any(
                q in _MEASURING_CALLS or q.startswith(_MEASURING_PREFIXES)
                or (q.startswith("torch.cuda.") and "memory" in q)
                for q in call.qualnames
            )
    if not measures:
        return False
    names = {n for n in _names(loss) if n != "_"}
    for name in list(names):
        for a in ctx.assignments_to(name, scope):
            if a.scope is scope and a.unpacked:
                names |= {b.target for b in ctx.assignments if b.node is a.node and "." not in b.target}
    names.discard("_")
    backwards = {id(e.call.node) for e in scope.events if e.kind == "backward"}
    reads = _visitor("_Reads")(names, backwards, scope.node)
    scope.node.visit(reads)
    return not reads.found


def _mentions_scaling(ctx: ModuleContext) -> bool:
    """Loss scaling of any kind in the code (not in comments or docstrings): a name
    holding a scaler (timm's `loss_scaler`, a `grad_scaler` parameter) or apex's
    `amp.scale_loss`. Conservative on purpose: such files may scale elsewhere."""
    names = [c.dotted or "" for c in ctx.calls] + [c.receiver_dotted or "" for c in ctx.calls]
    names += [a.target for a in ctx.assignments] + [p for s in ctx.scopes for p in s.params]
    return any("scaler" in n.lower() or "scale_loss" in n for n in names)


def _loss_expression(call: CallInfo) -> Optional[cst.BaseExpression]:
    if call.calls_any(("torch.autograd.backward",)):
        return call.arg(0, "tensors")
    if call.method == "backward" and call.receiver is not None:
        return call.receiver
    return None


def _names(expr: cst.CSTNode) -> Set[str]:
    import libcst as cst

    if isinstance(expr, cst.Name):
        return {expr.value}
    names = _visitor("_DataNames")()
    expr.visit(names)
    return names.found


def _last_assignment(ctx: ModuleContext, scope: Scope, name: str, before: int, at) -> Optional[Assignment]:
    from amplint.model import exclusive

    found = None
    for a in ctx.assignments_to(name, scope):
        if a.scope is scope and a.order < before and not exclusive(a.path, at):
            found = a
    return found


def _fp16_source(ctx: ModuleContext, scope: Scope, event: Event, loss: cst.BaseExpression) -> Optional[AutocastRegion]:
    """The fp16 region the loss (or a value it is computed from) was computed in."""
    region = _returned_from_fp16(ctx, loss)
    if region is not None:
        return region
    # (name, order, path): a name as the code at `order` reads it, i.e. its last assignment before
    # that point; `loss = loss / n` reads the `loss` assigned before it, not itself
    frontier = [(name, event.order, event.path) for name in _names(loss)]
    seen: Set[int] = set()
    for _ in range(4):
        following = []
        for name, before, at in frontier:
            a = _last_assignment(ctx, scope, name, before, at)
            if a is None or id(a.node) in seen:
                continue
            seen.add(id(a.node))
            if _is_fp16(ctx, a.region):
                return a.region
            region = _returned_from_fp16(ctx, a.value)
            if region is not None:
                return region
            following += [(n, a.order, a.path) for n in _names(a.value)]
        frontier = following
    return None


def _returned_from_fp16(ctx: ModuleContext, value: cst.BaseExpression) -> Optional[AutocastRegion]:
    """`self.compute_loss(batch)` (possibly `/ n`) whose function returns a value computed under fp16 autocast."""
    import libcst as cst

    calls: List[cst.Call] = []
    if isinstance(value, cst.Call):
        calls.append(value)
    elif isinstance(value, cst.BinaryOperation):
        for side in (value.left, value.right):
            if isinstance(side, cst.Call):
                calls.append(side)
    for node in calls:
        info = ctx.call_info(node)
        if info is None:
            continue
        if _is_fp16(ctx, info.region):
            return info.region
        callee = ctx.callee(info)
        if callee is None or not isinstance(callee.node, cst.FunctionDef):
            continue
        for ret in _returns(callee.node):
            if ret.value is None:
                continue
            for inner in _calls_in(ret.value):
                ci = ctx.call_info(inner)
                if ci is not None and _is_fp16(ctx, ci.region):
                    return ci.region if not _switched_off(ctx, info, callee, ci.region, ci.path) else None
            # the names the return reads, and the names their assignments in the helper read, a few
            # hops back (`pred = unet(x)` under the region, `loss = F.mse_loss(pred, y)` after it,
            # `return loss`), as `_fp16_source` follows the caller's names
            frontier, seen = list(_names(ret.value)), set()
            for _ in range(4):
                following = []
                for name in frontier:
                    if name in seen:
                        continue
                    seen.add(name)
                    for a in ctx.assignments_to(name, callee):
                        if a.scope is not callee:
                            continue
                        if _is_fp16(ctx, a.region):
                            return a.region if not _switched_off(ctx, info, callee, a.region, a.path) else None
                        following += _names(a.value)
                frontier = following
    return None


def _switched_off(ctx: ModuleContext, call: CallInfo, callee: Scope, region: AutocastRegion, path) -> bool:
    """The helper's fp16 region is switched by a parameter of the helper (`if mixed_precision:`
    around the value, or `autocast(enabled=mixed_precision)`) that is off on every run the file
    shows for `call`: the call passes a literal False or None (or nothing, over such a default),
    or hands down a parameter of its own function that every call of that function in the file
    passes off (its default where a call passes nothing, and where nothing calls it)."""
    import libcst as cst

    from amplint.model import call_arg

    params = _param_nodes(callee)
    switches = {f.test.value for f in path if f.kind == "if" and isinstance(f.test, cst.Name) and f.test.value in params}
    enabled = call_arg(region.call, None, "enabled")
    if isinstance(enabled, cst.Name) and enabled.value in params:
        switches.add(enabled.value)
    return any(_off_at(ctx, call, callee, name, depth=0) for name in switches)


def _region_off_everywhere(ctx: ModuleContext, region: AutocastRegion) -> bool:
    """The region is entered only when a parameter of its function is on (`if with_amp:` around
    the autocast, or `enabled=with_amp`), the function never rebinds it, and every call of the
    function the file shows leaves it off (see `_off_at`); silent-making only with such calls."""
    import libcst as cst

    from amplint.model import call_arg

    info = ctx.call_info(region.call)
    if info is None or info.scope is None or info.scope.is_module:
        return False
    func = info.scope
    params = _param_nodes(func)
    switches = {f.test.value for f in info.path if f.kind == "if" and isinstance(f.test, cst.Name) and f.test.value in params}
    enabled = call_arg(region.call, None, "enabled")
    if isinstance(enabled, cst.Name) and enabled.value in params:
        switches.add(enabled.value)
    switches = {n for n in switches if not any(a.scope is func for a in ctx.assignments_to(n))}
    callers = _callers_of(ctx, func)
    if not switches or not callers:
        return False
    return any(all(_off_at(ctx, c, func, name, depth=0) for c in callers) for name in switches)


#: what starts processes running a function of the file with the given arguments, the process
#: index first: `mp.spawn(cls._worker, (with_fsdp, with_amp), nprocs=2)`
_SPAWNS = ("torch.multiprocessing.spawn", "torch.multiprocessing.spawn.spawn", "mp.spawn")


def _spawned(ctx: ModuleContext, call: CallInfo) -> Optional[Scope]:
    """The function of the file `mp.spawn(fn, args)` runs: `fn` a name, `self.m` or `cls.m`."""
    import libcst as cst

    if not (call.calls_any(_SPAWNS) or call.dotted in _SPAWNS):
        return None
    fn = call.arg(0, "fn")
    if isinstance(fn, cst.Name):
        name, cls = fn.value, None
    elif isinstance(fn, cst.Attribute) and isinstance(fn.value, cst.Name) and fn.value.value in ("self", "cls"):
        name, cls = fn.attr.value, call.scope.cls
        if cls is None:
            return None
    else:
        return None
    found = [s for s in ctx.scopes if s.name == name and not s.is_module and s.cls is cls]
    return found[0] if len(found) == 1 else None


def _method_of_cls(ctx: ModuleContext, call: CallInfo) -> Optional[Scope]:
    """`cls.m(...)` in a classmethod: the method `m` of the caller's class."""
    if call.receiver_dotted != "cls" or not call.method or call.scope.cls is None:
        return None
    found = [s for s in ctx.scopes if s.name == call.method and s.cls is call.scope.cls]
    return found[0] if len(found) == 1 else None


def _callers_of(ctx: ModuleContext, func: Scope) -> List[CallInfo]:
    """The calls of the file that run `func`: direct calls, `cls.m(...)`, and `mp.spawn(func, args)`."""
    found = list(ctx.callers(func))
    for c in ctx.calls:
        if c not in found and (_method_of_cls(ctx, c) is func or _spawned(ctx, c) is func):
            found.append(c)
    return found


def _passed(ctx: ModuleContext, call: CallInfo, callee: Scope, name: str) -> tuple:
    """(known, value): what `call` passes `callee`'s parameter `name` (None: nothing spelled)."""
    import libcst as cst

    positional = list(callee.node.params.params)
    index = next((i for i, p in enumerate(positional) if p.name.value == name), None)
    bound = bool(positional) and positional[0].name.value in ("self", "cls")
    if _spawned(ctx, call) is callee:
        if index is not None and bound and isinstance(call.arg(0, "fn"), cst.Attribute):
            index -= 1  # `cls._worker`: the class fills the first parameter
        args = call.arg(1, "args")
        if index is None or index < 1:
            return False, None  # the process index, or a keyword-only parameter spawn never fills
        if args is None:
            return True, None
        if not isinstance(args, cst.Tuple) or any(isinstance(e, cst.StarredElement) for e in args.elements):
            return False, None
        elements = [e.value for e in args.elements]
        return True, elements[index - 1] if index - 1 < len(elements) else None
    if index is not None and bound and call.method is not None:
        index -= 1  # `self.helper(...)`: the receiver fills the first parameter
    return True, call.arg(index if index is not None and index >= 0 else None, name)


def _param_nodes(scope: Scope) -> Dict[str, Any]:
    import libcst as cst

    node = scope.node
    if not isinstance(node, cst.FunctionDef):
        return {}
    return {p.name.value: p for p in (*node.params.params, *node.params.kwonly_params)}


def _off_at(ctx: ModuleContext, call: CallInfo, callee: Scope, name: str, depth: int) -> bool:
    """Whether `call` (of `callee`) leaves `callee`'s parameter `name` off (see `_switched_off`)."""
    import libcst as cst

    params = _param_nodes(callee)
    param = params.get(name)
    if param is None:
        return False
    known, value = _passed(ctx, call, callee, name)
    if not known:
        return False
    if value is None:
        value = param.default
        if value is None:
            return False  # a required parameter not spelled here (`*args`): unknown
    if _falsy(value):
        return True
    if not isinstance(value, cst.Name) or depth >= 2:
        return False
    outer = call.scope
    outer_params = _param_nodes(outer) if outer is not None else {}
    local = [a for a in ctx.assignments_to(value.value) if a.scope is outer]
    if value.value not in outer_params:
        # `with_amp = False` then `self._run(with_amp=with_amp)`: a local bound only to off literals
        return bool(local) and outer is not None and not outer.is_module and all(
            not a.unpacked and a.order < call.order and _falsy(a.value) for a in local)
    if local:
        return False
    callers = _callers_of(ctx, outer)
    if not callers:
        default = outer_params[value.value].default
        return default is not None and _falsy(default)
    return all(_off_at(ctx, c, outer, value.value, depth + 1) for c in callers)


def _falsy(node: cst.BaseExpression) -> bool:
    import libcst as cst

    return isinstance(node, cst.Name) and node.value in ("False", "None") or isinstance(node, cst.Integer) and node.value == "0"


def _returns(func: cst.FunctionDef) -> List[cst.Return]:
    returns = _visitor("_Returns")(func)
    func.visit(returns)
    return returns.found


def _calls_in(expr: cst.CSTNode) -> List[cst.Call]:
    calls = _visitor("_Calls")()
    expr.visit(calls)
    return calls.found


#: the visitors below, made on first use (they subclass libcst's visitor: the project half never loads it)
_VISITORS: Dict[str, Any] = {}


def _visitor(name: str) -> Any:
    if not _VISITORS:
        _VISITORS.update(_visitors())
    return _VISITORS[name]


def _visitors() -> Dict[str, Any]:
    """The module's libcst visitors, defined once (a class defined per call would hold its
    closure, and so the file's tree, in a reference cycle; these close over libcst only)."""
    import libcst as cst

    class _Reads(cst.CSTVisitor):
        """Whether the code of one scope (not of functions, lambdas or classes nested in it) reads
        any of `names` as a value, or returns a value. Not reads: the receiver of a `backward()` call,
        `x is None` / `x is not None`, `del x`, and an assignment that rebinds one of the names
        (`loss = loss / accum`)."""

        def __init__(self, names: Set[str], backwards: Set[int], root: cst.CSTNode) -> None:
            super().__init__()
            self.names = names
            self.backwards = backwards
            self.root = root
            self.found = False

        def visit_FunctionDef(self, node: cst.FunctionDef) -> bool:
            return node is self.root

        def visit_ClassDef(self, node: cst.ClassDef) -> bool:
            return False

        def visit_Lambda(self, node: cst.Lambda) -> bool:
            return False

        def visit_Parameters(self, node: cst.Parameters) -> bool:
            return False

        def visit_Return(self, node: cst.Return) -> bool:
            if node.value is not None:
                self.found = True
            return False

        def visit_Assign(self, node: cst.Assign) -> bool:
            targets: Set[str] = set()
            for t in node.targets:
                targets |= _names(t.target) if not isinstance(t.target, cst.Name) else {t.target.value}
            if targets and targets <= self.names | {"_"}:
                return False  # `loss = loss / n`: the loss again
            node.value.visit(self)
            return False

        def visit_AugAssign(self, node: cst.AugAssign) -> bool:
            if isinstance(node.target, cst.Name) and node.target.value in self.names:
                return False
            node.value.visit(self)
            return False

        def visit_Del(self, node: cst.Del) -> bool:
            return False

        def visit_Comparison(self, node: cst.Comparison) -> bool:
            if (
                isinstance(node.left, cst.Name)
                and len(node.comparisons) == 1
                and isinstance(node.comparisons[0].operator, (cst.Is, cst.IsNot))
                and isinstance(node.comparisons[0].comparator, cst.Name)
                and node.comparisons[0].comparator.value == "None"
            ):
                return False
            return True

        def visit_Call(self, node: cst.Call) -> bool:
            return id(node) not in self.backwards

        def visit_Attribute(self, node: cst.Attribute) -> bool:
            node.value.visit(self)  # `outputs.loss`: `loss` is an attribute's name here, not the variable
            return False

        def visit_Arg(self, node: cst.Arg) -> bool:
            node.value.visit(self)  # `f(loss=x)`: a keyword is no read
            return False

        def visit_Name(self, node: cst.Name) -> None:
            if node.value in self.names:
                self.found = True

    class _DataNames(cst.CSTVisitor):
        """For `_names` (module level: a class defined per call would hold its closure, and so the file's tree, in a reference cycle)."""

        def __init__(self) -> None:
            super().__init__()
            self.found: Set[str] = set()

        def visit_Name(self, node: cst.Name) -> None:
            self.found.add(node.value)

        def visit_Attribute(self, node: cst.Attribute) -> bool:
            # `outputs.loss` -> outputs; never the attribute names themselves
            node.value.visit(self)
            return False

        def visit_Call(self, node: cst.Call) -> bool:
            # arguments only: a callee's name is not data
            for arg in node.args:
                arg.value.visit(self)
            if isinstance(node.func, cst.Attribute):
                node.func.value.visit(self)
            return False

        def visit_Lambda(self, node: cst.Lambda) -> bool:
            return False

    class _Returns(cst.CSTVisitor):
        """The `return`s of one function, not of functions or lambdas nested in it
        (module level: a class defined per call would hold its closure, and so the file's tree, in a reference cycle)."""

        def __init__(self, func: cst.FunctionDef) -> None:
            super().__init__()
            self.func = func
            self.found: List[cst.Return] = []

        def visit_Return(self, node: cst.Return) -> None:
            self.found.append(node)

        def visit_FunctionDef(self, node: cst.FunctionDef) -> bool:
            return node is self.func

        def visit_Lambda(self, node: cst.Lambda) -> bool:
            return False

    class _Calls(cst.CSTVisitor):
        """For `_calls_in` (module level: a class defined per call would hold its closure, and so the file's tree, in a reference cycle)."""

        def __init__(self) -> None:
            super().__init__()
            self.found: List[cst.Call] = []

        def visit_Call(self, node: cst.Call) -> None:
            self.found.append(node)

    return {"_Reads": _Reads, "_DataNames": _DataNames, "_Returns": _Returns, "_Calls": _Calls}
