"""AMP803 fp16-gradient-reduction."""
from __future__ import annotations

import re

from typing import Any, Dict, Iterator

from amplint.model import (
    Diagnostic, Invalid, Rule, ScaleFinding, ScaleView, Severity, Valid, command_line_bool, scale_file_diagnostics,
    scale_project_diagnostics,
)


class Fp16GradientReduction(Rule):
    """
    ## What it does
    Flags gradients reduced across ranks in fp16:

    - an FSDP1 `MixedPrecision(...)` or FSDP2 `MixedPrecisionPolicy(...)` with
      `reduce_dtype=torch.float16`, or with `param_dtype=torch.float16` and no
      `reduce_dtype` (both FSDPs then reduce in the parameter dtype);
    - a Lightning `Fabric`/`Trainer` with an FSDP strategy and
      `precision="16-mixed"` (its FSDP plugin builds a policy reducing in fp16);
    - an `accelerate launch` the project ships (a shell script, a Makefile, a
      README command block) that puts FSDP behind `prepare` in fp16
      (`--use_fsdp --mixed_precision fp16`, or a `--config_file` YAML of the
      project with `distributed_type: FSDP` and `mixed_precision: fp16`),
      starting a script whose `Accelerator(...)` (there or in a project
      module it imports) takes both from the launch: accelerate's FSDP plugin
      then builds its policy with `reduce_dtype` equal to the fp16
      `param_dtype` (`FullyShardedDataParallelPlugin.set_mixed_precision`,
      accelerate 1.16; no launcher option or config key sets another).
      Reported at the launch's fp16 (the option, or the YAML line); silent
      where an Accelerator of the launched files passes a plugin, `**kwargs`
      or a precision of its own, or the files build an FSDP plugin or a
      `mixed_precision_policy` in code;
    - a Hugging Face `Trainer` run with FSDP in fp16:
      `TrainingArguments(fsdp="full_shard ...", fp16=True)` in a file that
      builds a `...Trainer(...)` and calls `.train()`, or a launch command
      the project ships passing `--fsdp full_shard ...` and `--fp16` to a
      script that parses its `TrainingArguments` with `HfArgumentParser`
      and trains: the Trainer hands accelerate an FSDP plugin without a
      policy and `mixed_precision="fp16"` (transformers 5.24
      `Trainer.create_accelerator_and_postprocess`; `fsdp_config` has no key
      for a policy), and the plugin then reduces in fp16 as above. Silent
      for `fsdp`/`--fsdp` values the file does not spell, `**kwargs`, an
      `fsdp_config` that is not a literal (or a project JSON) or hands the
      sharding to torch_xla, and a `--bf16` beside it. The Trainer's loss
      scaler is right (AMP802 stays silent);
    - a DDP `register_comm_hook(state, fp16_compress_hook)` (from
      `default_hooks` or its re-export `ddp_comm_hooks.default`; or
      `fp16_compress_wrapper`, or the project's own copy of it: a hook that
      casts the bucket to fp16 and all-reduces it) in a file that builds no
      GradScaler on the paths that register the hook.

    ## Why is this bad?
    A reduce-scatter or all-reduce sums the gradients of every rank in the
    reduction dtype. In fp16 the sum overflows to inf beyond 65504 and loses
    everything below about 6e-8: FSDP pre- and post-divides by about the
    square root of the world size to postpone the overflow (pytorch/pytorch#78774),
    which trades it for underflow, and both get worse with more ranks. With a
    GradScaler the overflow skips the step and halves the scale (more skipped
    steps, less headroom); without one it reaches the optimizer. The
    `MixedPrecision` docstring of torch 2.13 states the default: "If this is
    `None` but `param_dtype` is not `None`, then this takes on the
    `param_dtype` value, still running gradient reduction in low precision."
    `fp16_compress_hook` casts the bucket to fp16 and then divides it by the
    world size (`torch/distributed/algorithms/ddp_comm_hooks/default_hooks.py`).
    Measured on 2 gloo ranks (docs/evidence.md#amp803): the hook turned a
    gradient of 70000 into inf and 3e-8 into 0, and under a GradScaler at
    65536 it skipped 2 of 12 steps that plain DDP did not skip.

    ## Example
    ```python
    policy = MixedPrecision(param_dtype=torch.float16, reduce_dtype=torch.float16)
    ```

    ## Use instead
    ```python
    policy = MixedPrecision(param_dtype=torch.float16, reduce_dtype=torch.float32)
    ```
    or bf16 (`torch.bfloat16` keeps fp32's range); for DDP, `bf16_compress_hook`
    or no compression hook.

    ## Notes
    A reduction in bf16 is not flagged (bf16 has fp32's range; its precision is
    the policy's stated choice). A dtype read from a config or a flag
    (`dtype_dict[cfg.reduce_dtype]`) is decided at run time: silent, except a
    dtype picked from a dict literal by an argparse option of the file (or a
    project module it imports directly) whose literal `choices` include a key
    that picks `torch.float16` (`reduce_dtype={"fp16": torch.float16,
    ...}[args.grad_precision or args.mixed_precision]`, or a `param_dtype` so
    picked with no `reduce_dtype`): on that supported run the reduction is
    fp16, and the message names it (`when --grad-precision is fp16: ...`).
    The pick may go through a name bound once in the function (or the
    module): `dtype = {"fp16": torch.float16, ...}[args.precision]` and then
    `reduce_dtype=dtype`, or a lookup table bound once and never changed in
    place (`DTYPES[args.precision]`); a name bound twice or a table changed
    in place is silent. Likewise a dtype read from a property (or an
    argument-less method) of the policy's own class that maps a setting's
    string values to dtype literals, one of them to `torch.float16`
    (`reduce_dtype=self.autocast_precision`, the property returning
    `torch.float16` when `self.precision == "amp_fp16"`): the class names that
    value as supported, and the message names it (`when precision is
    "amp_fp16": ...`). Silent when the property refuses fp16 (raises), when
    its tests are anything but the one setting compared with string literals
    (`torch.cuda.is_bf16_supported()`), or when a branch returns anything but
    a dtype literal. A dtype read from a config file or a command line by name
    (`getattr(torch, cfg.model.fsdp_policy_mp)`, a YAML `reduce_dtype: fp16`)
    is not followed. A comm hook
    in a file that also builds a GradScaler is silent too: the scaler catches
    the overflow (docs/evidence.md), unless that scaler is built only under an
    `if` the hook is not under (`if amp_level != "O0": scaler = GradScaler()`
    and the hook registered on every run): the runs without a scaler reduce
    unscaled gradients in fp16, where the measured hook zeroed small ones.
    A scaler built in another function of the file is compared by the
    `if` tests around each: built only under a test the hook is not also
    under (`if args.use_amp:` in `init_scaler`, the hook under `if
    args.fp16_grad_sync:` in `wrap_model`), it leaves those runs unscaled
    and the hook is reported; under the same tests (`if args.fp16:` both),
    or built unconditionally there, it is silent.
    Where the scaler lives in another file of the project (a trainer class
    the hook's module never names, a test apart), the hook is still reported
    (the fp16 all-reduce is real, and which runs use the scaler is the run's
    choice), with the scaler as a related site and no "no GradScaler" claim;
    the per-file pass, which reads no other file, keeps the claim.

    A policy built in a function that replaces the sharding it is for with a
    fake (a test's `monkeypatch.setattr(fsdp, "fully_shard", fake)`,
    `mock.patch("...FullyShardedDataParallel")`, in its body or as its
    decorator) reaches no real sharding: nothing is reduced. Replacing
    anything else (`dist.get_world_size`) changes nothing.

    A `Fabric` made in a function from which no training step can run (no
    backward, optimizer step or training call in it, in what it defines, or in
    the project functions it calls or hands on, and the `Fabric` does not leave
    it) reduces no gradient: a forward-only test or an export is silent.
    Likewise a policy built in such a function and handed there (inline, or
    by a name only FSDP wrappers read) to an FSDP wrapper of a module the
    function makes itself (a local, not a parameter or a global): a script
    that shards a model only to load and save its checkpoint (a sharded to
    full converter) reduces no gradient.

    ## References
    - amplint's evidence page: `amplint --explain AMP803` (docs/evidence.md#amp803)
    - pytorch/pytorch#78774; verl-project/verl#6150; ibm-granite/dolomite-engine#141
    - https://pytorch.org/docs/stable/fsdp.html#torch.distributed.fsdp.MixedPrecision
    """

    code = "AMP803"
    name = "fp16-gradient-reduction"
    severity = Severity.WARNING
    text_only = True  # reads `ast` scale summaries: no libcst parse
    message = "gradients are reduced across ranks in fp16"
    triggers = ("MixedPrecision", "fp16_compress", "register_comm_hook", "16-mixed", "precision=16", 'precision="16', "TrainingArguments")
    requires = (("float16", "half", "fp16", "register_comm_hook", "16-mixed", "precision=16", 'precision="16'),)
    gate_regex = re.compile(r"MixedPrecision(?:Policy)?\s*\(|fp16_compress|register_comm_hook|Fabric\s*\(|Trainer\s*\(|TrainingArguments\s*\(")

    VALID = [
        Valid(
            """
import argparse
import torch
from torch.distributed.fsdp import MixedPrecision
parser = argparse.ArgumentParser()
parser.add_argument("--mixed-precision", choices=["fp32", "bf16"], default="bf16")
args = parser.parse_args()
policy = MixedPrecision(param_dtype={"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}[args.mixed_precision])
""",
            "the option's choices never pick the fp16 entry",
        ),
        Valid(
            """
import argparse
import torch
from torch.distributed.fsdp import MixedPrecision
DTYPES = {"fp16": torch.float16, "bf16": torch.bfloat16}
def main(args):
    dtype = {"fp16": torch.float16, "bf16": torch.bfloat16}[args.precision]
    if args.safe_reduce:
        dtype = torch.float32
    policy = MixedPrecision(param_dtype=dtype, reduce_dtype=dtype)
    DTYPES["fp16"] = torch.float32
    grads = MixedPrecision(param_dtype=torch.bfloat16, reduce_dtype=DTYPES[args.precision])
parser = argparse.ArgumentParser()
parser.add_argument("--precision", choices=["fp16", "bf16"], default="bf16")
main(parser.parse_args())
""",
            "a name bound twice, and a lookup table changed in place: what they hold is not the literal",
        ),
        Valid(
            """
import torch
from torch.distributed.fsdp import MixedPrecision
policy = MixedPrecision(param_dtype=torch.float16, reduce_dtype=torch.float32, buffer_dtype=torch.float16)
""",
            "compute in fp16, reduce in fp32",
        ),
        Valid(
            """
import torch
from torch.distributed.fsdp import MixedPrecision
bfSixteen = MixedPrecision(param_dtype=torch.bfloat16, reduce_dtype=torch.bfloat16, buffer_dtype=torch.bfloat16)
""",
            "bf16 reduction: fp32's range",
        ),
        Valid(
            """
import torch
from torch.distributed.fsdp import MixedPrecision
dtypes = {"fp16": torch.float16, "fp32": torch.float32}
policy = MixedPrecision(param_dtype=dtypes[cfg.param_dtype], reduce_dtype=dtypes[cfg.reduce_dtype])
""",
            "dtypes read from a config: decided at run time",
        ),
        Valid(
            """
import torch
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
model.register_comm_hook(None, default_hooks.fp16_compress_hook)
scaler = torch.amp.GradScaler("cuda")
""",
            "the GradScaler in the file catches the overflow",
        ),
        Valid(
            """
import lightning as L
fabric = L.Fabric(strategy="fsdp", precision="bf16-mixed")
""",
            "Lightning FSDP in bf16",
        ),
        Valid(
            """
import torch
import torch.distributed as dist
def compress_hook(process_group, bucket):
    t = bucket.buffer().to(torch.bfloat16).div_(dist.get_world_size())
    return dist.all_reduce(t, async_op=True).get_future().then(lambda f: bucket.buffer().copy_(f.value()[0]))
model = torch.nn.parallel.DistributedDataParallel(net)
model.register_comm_hook(state=None, hook=compress_hook)
""",
            "the project's own hook compresses to bf16: fp32's range",
        ),
        Valid(
            """
import deepspeed
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
engine, optimizer, _, _ = deepspeed.initialize(model=net, config="ds_config.json")
try:
    engine.register_comm_hook(state=None, hook=default_hooks.fp16_compress_hook)
except AttributeError:
    pass
""",
            "a DeepSpeed engine is no DDP module: the hook is never registered",
        ),
        Valid(
            """
import torch
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
def train(args, net):
    if args.amp:
        scaler = torch.amp.GradScaler("cuda")
        model = torch.nn.parallel.DistributedDataParallel(net)
        model.register_comm_hook(None, default_hooks.fp16_compress_hook)
""",
            "the hook is registered only on the branch that builds the scaler",
        ),
        Valid(
            """
import torch
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
def wrap_model(args, net):
    model = torch.nn.parallel.DistributedDataParallel(net)
    if args.fp16:
        model.register_comm_hook(None, default_hooks.fp16_compress_hook)
    return model
def init_scaler(args):
    if args.fp16:
        return torch.amp.GradScaler("cuda")
    return None
""",
            "the scaler of another function is built under the same test as the hook",
        ),
        Valid(
            """
import torch
import lightning as L
def test_fsdp_forward():
    fabric = L.Fabric(devices=2, strategy="fsdp", precision="16-true")
    fabric.launch()
    model = fabric.setup(torch.nn.Linear(8, 8))
    y = model(torch.randn(2, 8, device=fabric.device))
    assert y.shape == (2, 8)
def test_train(model, optimizer):
    model(torch.randn(2, 8)).sum().backward()
    optimizer.step()
""",
            "a forward-only test: no gradient is reduced from the function that makes the Fabric",
        ),
        Valid(
            """
import torch
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP, MixedPrecision, StateDictType
from project.model import Net
def consolidate(args):
    model = FSDP(Net(), mixed_precision=MixedPrecision(param_dtype=torch.float16))
    optimizer = torch.optim.AdamW(model.parameters())
    with FSDP.state_dict_type(model, StateDictType.SHARDED_STATE_DICT):
        state = torch.load(args.shard)
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
    torch.save({"model": model.state_dict(), "optim": FSDP.optim_state_dict(model, optimizer)}, args.out)
""",
            "a checkpoint converter: the sharded model it makes only loads and saves, no gradient is reduced",
        ),
        Valid(
            """
import torch
import torch.distributed.fsdp as fsdp_module
from torch.distributed.fsdp import MixedPrecisionPolicy
from project.norms import shard_norms_fp32
def test_norms_are_sharded_in_fp32(monkeypatch):
    seen = []
    def fake_fully_shard(module, mp_policy=None, **kwargs):
        seen.append(mp_policy)
        return module
    monkeypatch.setattr(fsdp_module, "fully_shard", fake_fully_shard)
    policy = MixedPrecisionPolicy(param_dtype=torch.float16)
    shard_norms_fp32(model, fully_shard_kwargs={"mp_policy": policy})
""",
            "a test that replaced fully_shard with a fake: nothing is sharded, no gradient reduced",
        ),
        Valid(
            """
from transformers import Trainer, TrainingArguments
args = TrainingArguments(output_dir="out", fsdp="full_shard auto_wrap", bf16=True)
Trainer(model=model, args=args, train_dataset=dataset).train()
fp16_args = TrainingArguments(output_dir="out", fsdp=cfg.fsdp, fp16=True)
xla_args = TrainingArguments(output_dir="out", fsdp="full_shard", fsdp_config={"xla": True}, fp16=True)
""",
            "the Trainer's FSDP in bf16; a sharding decided at run time; FSDP handed to torch_xla",
        ),
        Valid(
            """
import torch
from torch.distributed.fsdp import MixedPrecision
class TrainConfig:
    @property
    def autocast_precision(self):
        if self.precision == "amp_bf16":
            return torch.bfloat16
        elif self.precision == "amp_fp16":
            raise ValueError("fp16 is not supported with FSDP")
        return torch.float32
    @property
    def compute_dtype(self):
        if torch.cuda.is_bf16_supported():
            return torch.bfloat16
        return torch.float16
    @property
    def fsdp_precision(self):
        return MixedPrecision(param_dtype=self.autocast_precision, reduce_dtype=self.autocast_precision)
    @property
    def mixed_fsdp_precision(self):
        return MixedPrecision(param_dtype=self.autocast_precision, reduce_dtype=torch.float32)
    def hardware_fsdp_precision(self):
        return MixedPrecision(param_dtype=self.compute_dtype, reduce_dtype=self.compute_dtype)
""",
            "the precision property maps no setting to fp16 (it refuses it); fp32 reduce; a hardware test is no setting",
        ),
        Valid(
            """
import torch
from torch.distributed.fsdp import MixedPrecision
def main():
    use_empty_init = True
    if use_empty_init:
        policy = MixedPrecision(param_dtype=torch.float16, reduce_dtype=torch.float32)
    else:
        policy = MixedPrecision(param_dtype=torch.float16)
""",
            "a site that never runs (docs/reach.md): the `else` of a test on a name bound once to `True`",
        ),
        Valid(
            """
import torch
from torch.distributed.algorithms.ddp_comm_hooks import default as comm_hooks
def create_ddp_model(model, *, fp16_compression=False, **kwargs):
    ddp = torch.nn.parallel.DistributedDataParallel(model, **kwargs)
    if fp16_compression:
        ddp.register_comm_hook(state=None, hook=comm_hooks.fp16_compress_hook)
    return ddp
model = create_ddp_model(net, broadcast_buffers=False)
""",
            "a site that never runs (docs/reach.md): the hook only under a default the project's only call leaves off",
        ),
    ]

    INVALID = [
        Invalid(
            """
import torch
from torch.distributed.fsdp import MixedPrecision
def main(args):
    use_empty_init = True
    if args.meta_init:
        use_empty_init = False
    if use_empty_init:
        policy = MixedPrecision(param_dtype=torch.float16, reduce_dtype=torch.float32)
    else:
        policy = MixedPrecision(param_dtype=torch.float16)
""",
            line=10,
            why="the name is bound twice: either branch may run (docs/reach.md)",
        ),
        Invalid(
            """
import torch
from torch.distributed.algorithms.ddp_comm_hooks import default as comm_hooks
def create_ddp_model(model, *, fp16_compression=False, **kwargs):
    ddp = torch.nn.parallel.DistributedDataParallel(model, **kwargs)
    if fp16_compression:
        ddp.register_comm_hook(state=None, hook=comm_hooks.fp16_compress_hook)
    return ddp
def build(net, **options):
    return create_ddp_model(net, **options)
""",
            line=6,
            why="a call forwards `**options`: it may pass `fp16_compression=True` (docs/reach.md)",
        ),
        Invalid(
            """
import torch
from torch.distributed.fsdp import MixedPrecision
class TrainConfig:
    precision: str = "amp_bf16"
    @property
    def fsdp_precision(self):
        return MixedPrecision(param_dtype=self.autocast_precision, reduce_dtype=self.autocast_precision)
    @property
    def autocast_precision(self):
        if self.precision == "amp_bf16":
            return torch.bfloat16
        elif self.precision == "amp_fp16":
            return torch.float16
        elif self.precision == "fp32":
            return torch.float32
        else:
            raise ValueError(f"Unexpected precision type {self.precision}")
""",
            line=7,
            why='the class maps precision "amp_fp16" to torch.float16: on that setting the reduce is fp16',
        ),
        Invalid(
            """
import argparse
import torch
from torch.distributed.fsdp import MixedPrecision
parser = argparse.ArgumentParser()
parser.add_argument("--mixed-precision", choices=["fp32", "bf16", "fp16"], default="bf16")
args = parser.parse_args()
policy = MixedPrecision(param_dtype=torch.bfloat16, reduce_dtype={"fp32": torch.float32, "fp16": torch.float16}[args.mixed_precision])
""",
            line=7,
            why="--mixed-precision fp16 is a supported choice: on it gradients are reduced in fp16",
        ),
        Invalid(
            """
import argparse
import torch
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP, MixedPrecision
def main(args, model):
    mixed_precision_dtype = {"fp16": torch.float16, "bf16": torch.bfloat16, "tf32": torch.float32}[args.precision]
    return FSDP(model, mixed_precision=MixedPrecision(param_dtype=mixed_precision_dtype, reduce_dtype=mixed_precision_dtype))
parser = argparse.ArgumentParser()
parser.add_argument("--precision", type=str, choices=["fp16", "bf16", "tf32"], default="bf16")
""",
            line=6,
            why="the lookup bound once to a name the policy reads: --precision fp16 reduces in fp16",
        ),
        Invalid(
            """
import torch
import torch.distributed as dist
from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
def test_sharded_training(monkeypatch):
    monkeypatch.setattr(dist, "get_world_size", lambda: 8)
    fully_shard(model, mp_policy=MixedPrecisionPolicy(param_dtype=torch.float16))
""",
            line=6,
            why="the test fakes the world size, not the sharding: fully_shard is real and reduces in fp16",
        ),
        Invalid(
            """
import torch
from torch.distributed.fsdp import MixedPrecision
fpSixteen = MixedPrecision(
    param_dtype=torch.float16,
    reduce_dtype=torch.float16,
    buffer_dtype=torch.float16,
)
""",
            line=5,
        ),
        Invalid(
            """
import torch
from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
fully_shard(model, mp_policy=MixedPrecisionPolicy(param_dtype=torch.float16))
""",
            line=3,
            why="reduce_dtype left to default to the fp16 param_dtype",
        ),
        Invalid(
            """
import torch
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks as default
model = torch.nn.parallel.DistributedDataParallel(net, device_ids=[rank])
model.register_comm_hook(state=None, hook=default.fp16_compress_hook)
""",
            line=4,
        ),
        Invalid(
            """
import lightning as L
fabric = L.Fabric(devices=8, strategy="fsdp", precision="16-mixed")
""",
            line=2,
        ),
        Invalid(
            """
import torch
import torch.distributed as dist
def fp16_hook(process_group, bucket):
    world_size = dist.get_world_size()
    compressed = bucket.buffer().to(torch.float16).div_(world_size)
    fut = dist.all_reduce(compressed, async_op=True).get_future()
    return fut.then(lambda f: bucket.buffer().copy_(f.value()[0]))
model = torch.nn.parallel.DistributedDataParallel(net)
model.register_comm_hook(state=None, hook=fp16_hook)
""",
            line=9,
            why="the project's own copy of fp16_compress_hook",
        ),
        Invalid(
            """
import torch
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
def train(args, net):
    loss_scaler = None
    if args.amp_level != "O0":
        loss_scaler = torch.amp.GradScaler("cuda")
    model = torch.nn.parallel.DistributedDataParallel(net)
    model.register_comm_hook(None, default_hooks.fp16_compress_hook)
""",
            line=8,
            why="the scaler exists on one branch; the hook on every run (O0 reduces unscaled fp32 gradients in fp16)",
        ),
        Invalid(
            """
import torch
from torch.distributed.algorithms.ddp_comm_hooks import default as comm_hooks
def wrap_model(args, model):
    model = torch.nn.parallel.DistributedDataParallel(model)
    if args.fp16_grad_sync:
        model.register_comm_hook(state=None, hook=comm_hooks.fp16_compress_hook)
    return model
def init_scaler(args):
    scaler = None
    if args.use_amp:
        scaler = torch.amp.GradScaler("cuda")
    return scaler
""",
            line=6,
            why="the scaler of another function exists only with --use_amp; the hook runs without it",
        ),
        Invalid(
            """
import torch
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP, MixedPrecision
from project.model import Net
from project.engine import train_one_epoch
def main(args):
    model = FSDP(Net(), mixed_precision=MixedPrecision(param_dtype=torch.float16))
    optimizer = torch.optim.AdamW(model.parameters())
    model.load_state_dict(torch.load(args.resume))
    train_one_epoch(model, optimizer)
""",
            line=6,
            why="the converter's twin hands its model to a training call the file cannot read",
        ),
        Invalid(
            """
import lightning as L
def setup():
    fabric = L.Fabric(devices=2, strategy="fsdp", precision="16-true")
    fabric.launch(main)
def main(fabric):
    model, optimizer = fabric.setup(build(), make_optimizer())
    loss = model(batch()).sum()
    fabric.backward(loss)
    optimizer.step()
""",
            line=3,
            why="the function it launches trains",
        ),
        Invalid(
            """
import lightning as L
from project.loop import run_loop
def run():
    fabric = L.Fabric(devices=2, strategy="fsdp", precision="16-mixed")
    run_loop(fabric)
""",
            line=4,
            why="the Fabric handed to code the file cannot read",
        ),
        Invalid(
            """
from transformers import Trainer, TrainingArguments
def main(model, dataset):
    args = TrainingArguments(output_dir="out", fsdp="full_shard auto_wrap", fp16=True)
    trainer = Trainer(model=model, args=args, train_dataset=dataset)
    trainer.train()
""",
            line=3,
            why="the Trainer's FSDP plugin reduces in its fp16 param dtype",
        ),
    ]

    def check_text(self, source: str, path: str) -> Iterator[Diagnostic]:
        yield from scale_file_diagnostics(self, source, path, self.findings)

    def check_project(self, project: Any) -> Iterator[Diagnostic]:
        yield from scale_project_diagnostics(self, project, self.findings)

    def findings(self, view: ScaleView) -> Iterator[ScaleFinding]:
        for path, e in view.events():
            if e["e"] == "ctor" and e["k"] == "policy" and not e.get("star"):
                found = self._policy(view, path, e)
            elif e["e"] == "ctor" and e["k"] in ("fabric", "trainer"):
                found = self._lightning(view, path, e)
            elif e["e"] == "ctor" and e["k"] == "trainargs":
                found = self._hf_trainer(view, path, e)
            elif e["e"] == "hook" and (e.get("d") == "fp16" or e.get("hs") and self._own_hook(view, path, e) == "fp16"):
                found = self._hook(view, path, e)
            else:
                continue
            if found is not None:
                yield found
        for launch in view.launches():
            found = self._launched_fsdp(view, launch)
            if found is None:
                found = self._launched_trainer(view, launch)
            if found is not None:
                yield found

    def _hf_trainer(self, view: ScaleView, path: str, e: Dict[str, Any]) -> Any:
        """`TrainingArguments(fsdp="full_shard ...", fp16=True)` in a file that builds a `Trainer`
        and trains: the Trainer hands accelerate an FSDP plugin without a policy and
        `mixed_precision="fp16"`, and accelerate's plugin then reduces in its fp16 param dtype
        (transformers 5.24 `Trainer.create_accelerator_and_postprocess`, accelerate 1.16
        `FullyShardedDataParallelPlugin.set_mixed_precision`; no `fsdp_config` key sets another)."""
        if e.get("fp16") is not True or e.get("bf16") or e.get("fsdp") != 1 or e.get("star") or e.get("fsdpx") == "?":
            return None
        if not _trains_with_trainer(view, path):
            return None
        r = e.get("fp16r") or e
        place = (path, r["r"], r["c"], r["er"], r["ec"])
        message = "`TrainingArguments(fsdp=..., fp16=True)` makes the Trainer reduce gradients across ranks in fp16"
        related = []
        if e.get("fsdpr"):
            f = e["fsdpr"]
            related.append(((path, f["r"], f["c"], f["er"], f["ec"]), "FSDP chosen here"))
        data = {"mechanism": "hf-trainer-fsdp", "precision": "fp16", "reduce_dtype": "fp16"}
        return ScaleFinding(place, message, _TRAINER_HELP, related, data)

    def _launched_trainer(self, view: ScaleView, launch: Any) -> Any:
        """A launch command the project ships passing `--fsdp full_shard ... --fp16` to a script
        whose `TrainingArguments` come from `HfArgumentParser`: the same policy as in code.
        Silent for a value the launcher cannot know (`$FSDP`), a `--bf16` beside it, and an
        `--fsdp_config` the project does not hold or that hands sharding to torch_xla."""
        fsdp = launch.arg("fsdp")
        fp16 = launch.arg("fp16")
        if fsdp is None or fp16 is None or command_line_bool(fp16[0]) is not True:
            return None
        bf16 = launch.arg("bf16")
        if bf16 is not None and command_line_bool(bf16[0]) is not False:
            return None
        if not (fsdp[0].lower() in ("true", "1") or fsdp[0] in _FSDP_WORDS):
            return None  # absent value, a shell expansion, a word the Trainer does not know
        config = launch.arg("fsdp_config")
        if config is not None:
            read = view.launcher_config(launch, config[0]) if config[0] else None
            if read is None or not isinstance(read.values, dict) or any(read.values.get(k) for k in ("xla", "fsdp_xla")):
                return None
        text = view.project_text(launch.script)
        if text is None or "HfArgumentParser" not in text or "parse_args" not in text or not _TRAINS.search(text):
            return None
        shown = launch.script.rsplit("/", 1)[-1]
        place = (launch.path, fp16[1], fp16[2], fp16[1], fp16[2] + len("--fp16"))
        message = f"`--fsdp` with `--fp16` makes the Trainer of `{shown}` reduce gradients across ranks in fp16"
        related = [((launch.path, fsdp[1], fsdp[2], fsdp[1], fsdp[2] + len("--fsdp")), "FSDP chosen here")]
        data = {"mechanism": "hf-trainer-fsdp", "precision": "fp16", "reduce_dtype": "fp16", "script": shown}
        return ScaleFinding(place, message, _TRAINER_HELP, related, data, config_file=True)

    def _launched_fsdp(self, view: ScaleView, launch: Any) -> Any:
        """`accelerate launch` putting FSDP behind `prepare` in fp16 (`--use_fsdp
        --mixed_precision fp16`, or a `--config_file` YAML with `distributed_type: FSDP` and
        `mixed_precision: fp16`): accelerate's FSDP plugin then builds its policy with
        `reduce_dtype` equal to the fp16 `param_dtype` (`FullyShardedDataParallelPlugin.
        set_mixed_precision`; no launcher option or config key sets another). Only where every
        `Accelerator(...)` the launched script and its project imports build takes both from the
        launch: no plugin, `**kwargs` or `cpu=` in the call, no precision of its own but fp16."""
        from amplint.model import launched_accelerators

        if launch.kind != "accelerate" or launch.mixed_precision != "fp16" or launch.plugins != frozenset(("fsdp",)):
            return None
        if launch.config is not None and launch.config.cpu is not False and launch.option("mixed_precision") is None:
            return None
        records = launched_accelerators(view.project, launch)
        if not records:
            return None
        for path, record in records:
            mp = record.get("mp")
            if record.get("x") or record.get("pl") or (mp is not None and mp != "fp16"):
                return None  # a plugin of its own (its own policy), or a precision the code decides
            text = view.project_text(path) or ""
            if "FullyShardedDataParallelPlugin" in text or "mixed_precision_policy" in text:
                return None  # an FSDP plugin built in code may carry its own policy
        shown = launch.script.rsplit("/", 1)[-1]
        if launch.precision_from_config:
            config = launch.config
            row = config.row("mixed_precision")
            place = (config.path, row, 1, row, 1 + len("mixed_precision"))
            message = f"`mixed_precision: fp16` under accelerate's FSDP reduces `{shown}`'s gradients across ranks in fp16"
        else:
            option = launch.option("mixed_precision")
            place = (launch.path, option[1], option[2], option[1], option[2] + len("--mixed_precision"))
            message = f"`accelerate launch --mixed_precision fp16` with FSDP reduces `{shown}`'s gradients in fp16"
        related = []
        fsdp = launch.option("use_fsdp") or next(((v, r, c) for n, v, r, c in launch.options if n.startswith("fsdp_")), None)
        if fsdp is not None:
            related.append(((launch.path, fsdp[1], fsdp[2], fsdp[1], fsdp[2] + 2), "FSDP chosen here"))
        elif launch.config is not None:
            row = launch.config.row("distributed_type")
            related.append(((launch.config.path, row, 1, row, 1 + len("distributed_type")), "FSDP chosen here"))
        if place[0] != launch.path:
            related.append(((launch.path, launch.row, launch.col, launch.row, launch.col + len("accelerate")), "launched here"))
        first_path, first = records[0]
        related.append(((first_path, first["r"], 1, first["r"], 1), "this Accelerator takes the launch's FSDP and fp16"))
        help = ("Build the FSDP plugin in code with `mixed_precision_policy=MixedPrecision(param_dtype=torch.float16, "
                "reduce_dtype=torch.float32)` (or launch in bf16): accelerate's default policy reduces in its param dtype")
        data = {"mechanism": "accelerate-fsdp", "precision": "fp16", "reduce_dtype": "fp16", "script": shown,
                "config": launch.config.path if launch.config is not None else None}
        return ScaleFinding(place, message, help, related, data, config_file=True)

    def _policy(self, view: ScaleView, path: str, e: Dict[str, Any]) -> Any:
        cls = "MixedPrecisionPolicy" if e["cls"] == "fsdp2" else "MixedPrecision"
        faked = (view.function(path, e["f"]) or {}).get("fakes") or ()
        if any((f == "fully_shard") == (e["cls"] == "fsdp2") for f in faked):
            return None  # the function replaced the sharding with a fake: the policy reduces nothing
        if _shards_untrained_local(view, path, e):
            return None  # a converter: the module it shards only loads and saves, no gradient is made
        if e.get("reduce") == "fp16" and e.get("rpos"):
            r = e["rpos"]
            place = (path, r["r"], r["c"], r["er"], r["ec"])
            message = f"`{cls}(reduce_dtype=torch.float16)` reduces gradients across ranks in fp16"
        elif e.get("reduce") is None and e.get("param") == "fp16":
            place = view.place(path, e)
            message = f"`{cls}` without `reduce_dtype` reduces gradients in its fp16 `param_dtype`"
        elif e.get("rch") and (e.get("reduce") == "?" or (e.get("reduce") is None and e.get("param") == "?")):
            return self._chosen(view, path, e, cls)
        elif e.get("rmap") and (e.get("reduce") == "?" or (e.get("reduce") is None and e.get("param") == "?")):
            return self._mapped(view, path, e, cls)
        else:
            return None
        help = "Pass `reduce_dtype=torch.float32` (or use bf16): an fp16 sum of every rank's gradients overflows"
        data = {"mechanism": "fsdp", "policy": cls, "param_dtype": e.get("param"), "reduce_dtype": e.get("reduce") or e.get("param")}
        return ScaleFinding(place, message, help, [], data)

    def _chosen(self, view: ScaleView, path: str, e: Dict[str, Any], cls: str) -> Any:
        """A reduction dtype picked from a dict literal by an argparse option whose literal
        `choices` include a key that picks `torch.float16` (`reduce_dtype={"fp16": torch.float16,
        ...}[args.grad_precision or args.mixed_precision]`, or `param_dtype` so picked with no
        `reduce_dtype`): on that supported run the gradients are reduced in fp16. A warning
        naming the choice; silent when no such option of the file (or the project modules it
        imports) has literal choices reaching an fp16 key."""
        from amplint.model import project_option

        choice = e["rch"]
        for dest in choice["o"]:
            option = project_option(view.project, path, dest)
            if option is None or not option[2]:
                continue
            keys = [k for k in choice["k"] if k in option[2]]
            if not keys:
                continue
            flag = option[1]
            field = "reduce_dtype" if e.get("reduce") == "?" else "param_dtype"
            r = e["rpos"] if field == "reduce_dtype" and e.get("rpos") else None
            place = (path, r["r"], r["c"], r["er"], r["ec"]) if r else view.place(path, e)
            message = f"when {flag} is {keys[0]}: `{cls}` reduces gradients across ranks in fp16"
            help = "Pass `reduce_dtype=torch.float32` whatever the option picks: an fp16 sum of every rank's gradients overflows"
            related = [((option[5], option[4], 1, option[4], 1), f"`{flag}` offers {keys[0]} here")]
            data = {"mechanism": "fsdp", "policy": cls, "param_dtype": e.get("param"), "reduce_dtype": "fp16", "choice": f"{flag} is {keys[0]}"}
            return ScaleFinding(place, message, help, related, data)
        return None

    def _mapped(self, view: ScaleView, path: str, e: Dict[str, Any], cls: str) -> Any:
        """A reduction dtype read from a property of the policy's own class that maps a setting's
        string values to dtype literals, one of them to `torch.float16` (`reduce_dtype=
        self.autocast_precision`, the property returning `torch.float16` when `self.precision ==
        "amp_fp16"`): the class names that value as supported, and on it the gradients are
        reduced in fp16. A warning naming the value, at the reduce (or the `param_dtype` so read
        with no `reduce_dtype`)."""
        mapping = e["rmap"]
        field = "reduce_dtype" if e.get("reduce") == "?" else "param_dtype"
        r = e["rpos"] if field == "reduce_dtype" and e.get("rpos") else None
        place = (path, r["r"], r["c"], r["er"], r["ec"]) if r else view.place(path, e)
        value = mapping["k"][0]
        message = f'when `{mapping["o"]}` is "{value}": `{cls}` reduces gradients across ranks in fp16'
        help = "Pass `reduce_dtype=torch.float32` whatever the precision setting: an fp16 sum of every rank's gradients overflows"
        related = [((path, mapping["pr"], 1, mapping["pr"], 1), f'`{mapping["p"]}` gives torch.float16 for "{value}" here')]
        data = {"mechanism": "fsdp", "policy": cls, "param_dtype": e.get("param"), "reduce_dtype": "fp16",
                "choice": f'{mapping["o"]} is {value}'}
        return ScaleFinding(place, message, help, related, data)

    def _lightning(self, view: ScaleView, path: str, e: Dict[str, Any]) -> Any:
        if e.get("prec") not in ("16-mixed", "16-true"):
            return None
        strategy = view._strategy_kind(path, e["f"], e.get("strategy"))
        if strategy != "fsdp":
            return None
        found = view._strategy_event(path, e["f"], e.get("strategy"))
        if found is not None and found[1].get("mp"):
            return None  # FSDPStrategy(mixed_precision=...) replaces the plugin's policy
        held = (e.get("t") or [""])[0]
        if e["k"] == "fabric" and view.never_trains(path, e["f"], held):
            return None  # no gradient is made, hence none reduced (a forward-only test, an export)
        what = "Fabric" if e["k"] == "fabric" else "Trainer"
        message = f'`{what}(precision="{e["prec"]}")` with FSDP reduces gradients across ranks in fp16'
        help = "Pass `FSDPStrategy(mixed_precision=MixedPrecision(..., reduce_dtype=torch.float32))`, or use bf16"
        data = {"mechanism": "lightning-fsdp", "precision": e["prec"], "reduce_dtype": "fp16"}
        return ScaleFinding(view.place(path, e), message, help, [], data)

    def _own_hook(self, view: ScaleView, path: str, e: Dict[str, Any]) -> Any:
        """The dtype a project's own comm hook compresses to: a function that casts the bucket
        to fp16 and all-reduces it (a copy of torch's `fp16_compress_hook`), resolved across files."""
        for p, func in view.callees(path, e["f"], e["hs"]):
            info = view.function(p, func)
            if info is not None and info.get("hook"):
                return info["hook"]
        return None

    def _hook(self, view: ScaleView, path: str, e: Dict[str, Any]) -> Any:
        if e.get("recv"):
            wrapped = view.wrappers(path, e["f"], e["recv"])
            if wrapped and all(w.kind == "deepspeed" for w in wrapped):
                return None  # a DeepSpeed engine has no `register_comm_hook`: the call raises, nothing is compressed
        s = view.summary(path)
        hook = f"`{e['hs']}` (an fp16 compression hook)" if e.get("hs") else "`fp16_compress_hook`"
        scalers = [
            ev for ev in (s["events"] if s is not None else [])
            if ev["e"] == "ctor" and ev["k"] == "scaler" and ev.get("en") is not False or ev["e"] == "scalerlike"
        ]
        if any(not _only_on_some_paths(ev, e) for ev in scalers):
            return None  # a scaler built on every path that registers the hook catches the overflow
        if scalers:
            first = min(scalers, key=lambda ev: (ev["r"], ev["c"]))
            message = (
                f"{hook} all-reduces gradients in fp16 on the runs that build no loss scaler"
            )
            related = [(view.place(path, first), "the loss scaler, built on one branch only")]
        else:
            elsewhere = _project_scaler(view, path)
            if elsewhere is not None:
                # the project builds a loss scaler in another file (detectron2's AMPTrainer): whether it
                # runs beside this hook is the run's choice; the fp16 reduction itself is real
                message = f"{hook} all-reduces gradients in fp16"
                related = [(view.place(*elsewhere), "a GradScaler of the project, in another file: on runs that use it, an overflow skips the step")]
            else:
                message = f"{hook} all-reduces gradients in fp16 with no GradScaler to catch overflow"
                related = []
        help = "Use `bf16_compress_hook` (fp32's range), or no compression hook"
        data = {"mechanism": "ddp-comm-hook", "reduce_dtype": "fp16", "own_hook": e.get("hs")}
        return ScaleFinding(view.place(path, e), message, help, related, data)


_TRAINER_HELP = ("Train in bf16 (`bf16=True`), or build the Trainer's FSDP plugin with "
                 "`mixed_precision_policy` reducing in fp32: the Trainer's fp16 FSDP policy reduces in fp16")
#: the `--fsdp` words of `TrainingArguments` (`FSDPOption`)
_FSDP_WORDS = frozenset(("full_shard", "shard_grad_op", "hybrid_shard", "hybrid_shard_zero2", "no_shard", "offload", "auto_wrap"))
#: a script that trains through a Hugging Face Trainer
_TRAINS = re.compile(r"Trainer\s*\(.*?\.train\s*\(", re.S)


def _shards_untrained_local(view: ScaleView, path: str, e: Dict[str, Any]) -> bool:
    """The policy `e` is built in a function (not a method, not the module) and read there only by
    FSDP wrappers (inline, or its one name), each wrapping a module the function makes itself (a
    local name, no parameter), and no training step can run from that function (`never_trains`:
    no backward, step or training call in it or what it reaches, nothing returned)."""
    func = e["f"]
    if func == "<module>":
        return False
    names = e.get("t") or []
    if len(names) > 1 or any("." in n for n in names):
        return False
    name = names[0] if names else None
    wraps = [
        w for w in view.policy_wraps(path, func)
        if (w["mpr"]["r"], w["mpr"]["c"]) == (e["r"], e["c"]) or (name is not None and w.get("mp") == name)
    ]
    if not wraps:
        return False
    info = view.project.function((path, func))
    if info is None or info.get("cls"):
        return False
    if name is not None:
        # the name read by anything but those wrappers (returned, handed on, stored) may leave
        at = {(w["r"], w["c"]) for w in wraps}
        for record in info.get("calls", ()):
            passed = [*record.get("a", ()), *record.get("k", {}).values()]
            if any(isinstance(a, dict) and a.get("n") == name for a in passed) and (record["r"], record["c"]) not in at:
                return False
    local = info.get("locals") or {}
    params = set(info.get("params") or ())
    for w in wraps:
        subject = w.get("s")
        if not subject or "." in subject or subject in params or subject not in local:
            if not _made_inline(info, w):
                return False
        if any("." in t for t in (w.get("t") or ())):
            return False
    return view.never_trains(path, func, "")


def _made_inline(info: Dict[str, Any], wrap: Dict[str, Any]) -> bool:
    """The wrapper's module is a call made in its argument list (`FSDP(Net(), ...)`)."""
    for record in info.get("calls", ()):
        if (record["r"], record["c"]) == (wrap["r"], wrap["c"]):
            first = record.get("a") or [None]
            return isinstance(first[0], dict) and "c" in first[0]
    return False


def _trains_with_trainer(view: ScaleView, path: str) -> bool:
    """The file builds a Hugging Face-style `...Trainer(...)` and calls a `.train(...)`."""
    s = view.summary(path) or {}
    calls = [c for uses in s.get("uses", {}).values() for c in uses]
    return any(c.rsplit(".", 1)[-1].endswith("Trainer") for c in calls) and any(c.endswith(".train") for c in calls)


def _project_scaler(view: ScaleView, path: str) -> Any:
    """(path, event) of the first loss scaler another file of the project builds (a test's
    apart); None in the per-file pass, which sees no other file."""
    for other, ev in view.events("ctor"):
        if other == path or ev["k"] != "scaler" or ev.get("en") is False or _is_test(view, other):
            continue
        return other, ev
    return None


def _is_test(view: ScaleView, path: str) -> bool:
    """A test file of the project (`tests/...`, `test_x.py`, `x_test.py`), by its path under the root."""
    import os

    root = getattr(view.project, "root", None)
    parts = (os.path.relpath(path, root) if root else path).replace("\\", "/").split("/")
    name = parts[-1]
    return name.startswith("test_") or name.endswith("_test.py") or any(p in ("tests", "test") for p in parts[:-1])


def _only_on_some_paths(scaler: Dict[str, Any], hook: Dict[str, Any]) -> bool:
    """The scaler is built under an `if` branch the hook is not under: the hook runs on paths (an
    fp32 run, another AMP level) where no scaler exists. In the hook's own function the branches
    are compared by position; in another function of the file by their tests' text: a scaler
    built there only under tests the hook is not also under (`if args.use_amp:` in
    `init_scaler`, the hook under `if args.fp16_grad_sync:`) leaves the runs without it."""
    inner, outer = scaler.get("p") or [], hook.get("p") or []
    if scaler["f"] != hook["f"]:
        if not inner:
            return False  # built on every call of its function: how the two meet is not known, keep silent
        tests, around = scaler.get("pt") or [], hook.get("pt") or []
        if len(tests) != len(inner) or len(around) != len(outer) or "" in tests:
            return False
        hook_tests = {(t, frame[1]) for t, frame in zip(around, outer)}
        return any((t, frame[1]) not in hook_tests for t, frame in zip(tests, inner))
    return inner[: len(outer)] != outer or len(inner) > len(outer)
