"""AMP801 fsdp-local-clip."""
from __future__ import annotations

import re

from typing import Any, Dict, Iterator

from amplint.model import (
    Diagnostic, Invalid, Rule, ScaleFinding, ScaleView, Severity, Valid, Wrapper, clip_owner_of, scale_file_diagnostics,
    scale_project_diagnostics,
)


class FsdpLocalClip(Rule):
    """
    ## What it does
    Flags `torch.nn.utils.clip_grad_norm_` on the parameters of a model wrapped
    by FSDP1 (`torch.distributed.fsdp.FullyShardedDataParallel`, or Lightning
    Fabric's `FSDPStrategy`, which wraps with it), where the model is wrapped
    in one module and clipped in another: the wrapper is followed through
    assignments, `self.` attributes, builder functions' returns, the
    arguments call sites pass, and `torch.compile` (its module holds the same
    parameters: `compiled.parameters()` and `compiled._orig_mod` are the FSDP
    module's). Models kept in a container are followed too: a `@dataclass` or
    `NamedTuple` (nested in a class as well) or a `SimpleNamespace` built with
    the wrapped model as a keyword (`self.Models(generator=generator)`), or an
    attribute bound on it, read back as `models.generator` in another method;
    and a base class's loop calling `self.backward_pass(..., models)` runs the
    override of the experiment's subclass, on the models that subclass's own
    `setup_models` returns (each experiment's wrap, not its siblings').
    A method of a base class reads the attributes the subclasses that
    inherit it bind (`TorchAgent.update_params` clips `self.model`, which
    `TorchGeneratorAgent.__init__` wraps): it runs on their instances. The
    auto-wrap API counts as the FSDP1 wrap it makes: `wrap(module)`
    (`torch.distributed.fsdp.wrap`) wraps with the `wrapper_cls` of the
    `enable_wrap(...)` context it runs in, when every `enable_wrap` of the
    project names `FullyShardedDataParallel` with sharding strategies the
    code shows (its keywords, or a `dict(...)` of options it spreads).

    ## Why is this bad?
    An FSDP1 module's `parameters()` are the rank's own shards (flat
    parameters, or with `use_orig_params=True` views of the local shard), so
    `torch.nn.utils.clip_grad_norm_` computes the norm of the local shard's
    gradients only. Every rank then clips by its own factor: the global norm is
    never bounded and the shards of one parameter are scaled differently, a
    silent change to the update (pytorch/pytorch#72548: "simply using
    clip_grad_norm_ would be incorrect as `model.parameters()` does not return
    the full set of unsharded parameters"). `FullyShardedDataParallel.clip_grad_norm_`
    all-reduces the shards' norms first (torch 2.13
    `torch/distributed/fsdp/fully_sharded_data_parallel.py`). Measured on 2 gloo
    ranks (docs/evidence.md#amp801; FSDP1's sharding by a stand-in, since
    FSDP1 needs an accelerator): the shards' local norms were 0.12 and 0.77
    for a global 0.78, so with `max_norm=0.25` rank 0 did not clip at all
    (factor 1.0 where 0.32 was due) while rank 1 clipped by 0.324.

    ## Example
    ```python
    model = FSDP(Net(), mixed_precision=policy)
    ...
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    ```

    ## Use instead
    ```python
    model.clip_grad_norm_(1.0)
    ```
    Under Fabric: `fabric.clip_gradients(model, optimizer, max_norm=1.0)`.

    ## Fix safety
    Unsafe: replaces the call with `model.clip_grad_norm_(max_norm)` when the
    torch call passes exactly the model's parameters and the norm (the
    method returns the total norm alike). Not offered under Fabric.

    ## Notes
    Silent for FSDP2 (`fully_shard`): its parameters are DTensors and
    `torch.nn.utils.clip_grad_norm_` reduces their norms across the mesh, which
    is the documented way to clip there. Silent for
    `sharding_strategy=ShardingStrategy.NO_SHARD` (every rank holds the whole
    gradient after the all-reduce) -- also when the wrap spreads an options dict
    (`FSDP(m, **self.fsdp_defaults)`) whose strategy the code sets to NO_SHARD, or
    to a value decided at run time, on an instance of the wrapping class
    (`core.fsdp_defaults["sharding_strategy"] = ShardingStrategy.NO_SHARD` in a
    script's `__main__`) --, for a `wrap(module)` whose `enable_wrap`
    contexts name another class, spread options the code does not show, or
    allow NO_SHARD, for a base-class method every subclass binding the FSDP1
    model overrides, for `clip_grad_value_` (element-wise, the
    same on a shard) and for a model the code does not show to be FSDP1 (a
    wrapper chosen by a registry or a flag value), and when the same function
    also calls the model's own `clip_grad_norm_` (it picks the clip by the
    wrapper, `if isinstance(model, FSDP): ... else: torch...`: the torch clip
    is the branch FSDP1 does not take). With fp16 the clip must also
    come after `scaler.unscale_(optimizer)`: AMP101.

    ## References
    - amplint's evidence page: `amplint --explain AMP801` (docs/evidence.md#amp801)
    - pytorch/pytorch#72548; PrimeIntellect-ai/OpenDiloco#6 (a fix of this shape)
    - https://pytorch.org/docs/stable/fsdp.html#torch.distributed.fsdp.FullyShardedDataParallel.clip_grad_norm_
    """

    code = "AMP801"
    name = "fsdp-local-clip"
    severity = Severity.ERROR
    text_only = True  # reads `ast` scale summaries: no libcst parse
    message = "torch clip on an FSDP model's parameters uses each rank's local norm"
    triggers = ("clip_grad_norm",)
    requires = (("FullyShardedDataParallel", "FSDP", "Fabric"),)
    #: the per-file pass sees a wrapper built in this file: an FSDP1 call or a Fabric (the
    #: project pass follows wrappers from other files whatever the gate)
    gate_regex = re.compile(r"FullyShardedDataParallel|\bFSDP\s*\(|Fabric\s*\(")

    VALID = [
        Valid(
            """
import torch
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
model = FSDP(Net())
loss = model(x).sum()
loss.backward()
model.clip_grad_norm_(1.0)
optimizer.step()
""",
            "FSDP's own clip reduces the shards' norms",
        ),
        Valid(
            """
import torch
from torch.distributed.fsdp import fully_shard
model = Net()
for block in model.blocks:
    fully_shard(block)
fully_shard(model)
loss = model(x).sum()
loss.backward()
torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
""",
            "FSDP2: DTensor parameters, the torch clip computes the global norm",
        ),
        Valid(
            """
import torch
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP, ShardingStrategy
model = FSDP(Net(), sharding_strategy=ShardingStrategy.NO_SHARD)
loss = model(x).sum()
loss.backward()
torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
""",
            "NO_SHARD: every rank holds the whole reduced gradient",
        ),
        Valid(
            """
import torch
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
model = FSDP(Net())
loss = model(x).sum()
loss.backward()
torch.nn.utils.clip_grad_value_(model.parameters(), 0.5)
""",
            "clipping by value is element-wise: the same on a shard",
        ),
        Valid(
            """
import torch
import lightning as L
fabric = L.Fabric(strategy="fsdp", precision="bf16-mixed")
model, optimizer = fabric.setup(model, optimizer)
fabric.backward(loss)
fabric.clip_gradients(model, optimizer, max_norm=1.0)
""",
            "Fabric's FSDP-aware clip",
        ),
        Valid(
            """
import torch
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
teacher = FSDP(Net())
student = Net().cuda()
loss = student(x).sum()
loss.backward()
torch.nn.utils.clip_grad_norm_(student.parameters(), 1.0)
""",
            "the clipped model is not the FSDP one",
        ),
        Valid(
            """
import torch
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP

class Trainer:
    def __init__(self, net, shard):
        self.model = FSDP(net) if shard else net

    def clip(self, limit):
        if isinstance(self.model, FSDP):
            return self.model.clip_grad_norm_(max_norm=limit)
        return torch.nn.utils.clip_grad_norm_(self.model.parameters(), max_norm=limit)
""",
            "the function picks the clip by the wrapper: the torch clip is the non-FSDP1 branch",
        ),
        Valid(
            """
import torch
from torch.distributed.fsdp import fully_shard
model = Net()
for block in model.blocks:
    fully_shard(block)
fully_shard(model)
model = torch.compile(model)
loss = model(x).sum()
loss.backward()
torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
""",
            "FSDP2 then torch.compile: still DTensor parameters, the torch clip is global",
        ),
        Valid(
            """
import torch
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
compiled = torch.compile(FSDP(Net()))
loss = compiled(x).sum()
loss.backward()
compiled.clip_grad_norm_(1.0)
""",
            "the compiled module hands on FSDP's own clip",
        ),
        Valid(
            """
import torch
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP, ShardingStrategy
from torch.distributed.fsdp.wrap import enable_wrap, wrap
options = dict(sharding_strategy=ShardingStrategy.NO_SHARD)
with enable_wrap(wrapper_cls=FSDP, **options):
    model = wrap(Net())
loss = model(x).sum()
loss.backward()
torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
""",
            "the auto-wrap context wraps with NO_SHARD: every rank holds the whole gradient",
        ),
        Valid(
            """
import torch
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP

class Agent:
    def update_params(self):
        torch.nn.utils.clip_grad_norm_(self.model.parameters(), 1.0)

class ShardedAgent(Agent):
    def __init__(self, net):
        self.model = FSDP(net)

    def update_params(self):
        self.model.clip_grad_norm_(1.0)
""",
            "the subclass that shards overrides the base class's torch clip",
        ),
    ]

    INVALID = [
        Invalid(
            """
import torch
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
model = FSDP(Net())
loss = model(x).sum()
loss.backward()
torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
optimizer.step()
""",
            line=6,
            fixed="""
import torch
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
model = FSDP(Net())
loss = model(x).sum()
loss.backward()
model.clip_grad_norm_(1.0)
optimizer.step()
""",
        ),
        Invalid(
            """
import torch
from torch.distributed.fsdp import FullyShardedDataParallel, MixedPrecision

def wrap(model, policy):
    return FullyShardedDataParallel(model, mixed_precision=policy, use_orig_params=True)

class Trainer:
    def __init__(self, net):
        self.model = wrap(net, MixedPrecision(param_dtype=torch.bfloat16))

    def step(self, batch):
        loss = self.model(batch).mean()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(self.model.parameters(), max_norm=1.0)
""",
            line=14,
            why="wrapped by a builder function, held in `self.model`",
        ),
        Invalid(
            """
import torch
import lightning as L
from lightning.fabric.strategies import FSDPStrategy

fabric = L.Fabric(strategy=FSDPStrategy(), precision="bf16-mixed")
model = fabric.setup_module(model)
fabric.backward(loss)
torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
""",
            line=8,
            why="Fabric's FSDPStrategy wraps the module in FullyShardedDataParallel",
        ),
        Invalid(
            """
import torch
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
model = torch.compile(FSDP(Net()))
loss = model(x).sum()
loss.backward()
torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
""",
            line=6,
            fixed="""
import torch
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
model = torch.compile(FSDP(Net()))
loss = model(x).sum()
loss.backward()
model.clip_grad_norm_(1.0)
""",
            why="torch.compile returns a module over the same sharded parameters",
        ),
        Invalid(
            """
import torch
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP

def build(net):
    model = FSDP(net)
    return torch.compile(model)

model = build(Net())
loss = model(x).sum()
loss.backward()
torch.nn.utils.clip_grad_norm_(model._orig_mod.parameters(), 1.0)
""",
            line=11,
            why="a builder returns the compiled FSDP model; `_orig_mod` is the FSDP module itself",
        ),
        Invalid(
            """
import torch
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP, ShardingStrategy
from torch.distributed.fsdp.wrap import enable_wrap, wrap

def build(net, zero3):
    strategy = ShardingStrategy.FULL_SHARD if zero3 else ShardingStrategy.SHARD_GRAD_OP
    options = dict(sharding_strategy=strategy, use_orig_params=True)
    with enable_wrap(wrapper_cls=FSDP, **options):
        return wrap(net)

model = build(Net(), zero3=True)
loss = model(x).sum()
loss.backward()
torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
""",
            line=14,
            why="`wrap` inside `enable_wrap(wrapper_cls=FSDP)` builds a sharded FSDP1 module",
        ),
        Invalid(
            """
import torch
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP

class Agent:
    def update_params(self):
        torch.nn.utils.clip_grad_norm_(self.model.parameters(), 1.0)

class ShardedAgent(Agent):
    def __init__(self, net, zero3):
        self.model = FSDP(net) if zero3 else net
""",
            line=6,
            why="the base class's method runs on the subclass's instance, whose `self.model` is FSDP1",
        ),
    ]

    def check_text(self, source: str, path: str) -> Iterator[Diagnostic]:
        yield from scale_file_diagnostics(self, source, path, self.findings)

    def check_project(self, project: Any) -> Iterator[Diagnostic]:
        yield from scale_project_diagnostics(self, project, self.findings)

    def findings(self, view: ScaleView) -> Iterator[ScaleFinding]:
        for path, clip in view.events("clip"):
            if clip["fn"] != "norm":
                continue
            owner = clip_owner_of(view, path, clip)
            if owner is None or _dispatches_on_wrapper(view, path, clip, owner):
                continue
            fsdp = [w for w in view.wrappers(path, clip["f"], owner) if w.sharded_fsdp1]
            if fsdp:
                yield self._finding(view, path, clip, owner, fsdp[0])

    def _finding(self, view: ScaleView, path: str, clip: Dict[str, Any], owner: str, w: Wrapper) -> ScaleFinding:
        spelled = clip.get("spelled") or "clip_grad_norm_"
        limit = clip.get("lim") or "max_norm"
        fabric = w.kind == "fabric"
        message = f"`{spelled}` on FSDP-sharded `{owner}` clips by each rank's local norm"
        if fabric:
            receiver = w.event.get("recv", "fabric")
            help = f"Call `{receiver}.clip_gradients({owner}, optimizer, max_norm={limit})`: it reduces the norm across ranks"
            note = f"set up by `{receiver}.{w.event.get('m', 'setup')}` under FSDPStrategy here"
        else:
            help = f"Call `{owner}.clip_grad_norm_({limit})`: FSDP reduces the shards' norms across ranks"
            note = "wrapped by `FullyShardedDataParallel` here"
        fix = None
        if not fabric and clip.get("o") == owner and clip.get("lim") and clip.get("simple"):
            fix = (f"Call `{owner}.clip_grad_norm_` instead", [(view.place(path, clip), f"{owner}.clip_grad_norm_({limit})")])
        data = {
            "wrapper": "fabric-fsdp" if fabric else "fsdp1",
            "model": owner,
            "max_norm": clip.get("lim"),
            "clip_function": spelled,
            "wrapper_site": [w.path, w.event["r"]],
            "sharding": w.event.get("shard"),
        }
        return ScaleFinding(view.place(path, clip), message, help, [(w.place, note)], data, fix)


def _dispatches_on_wrapper(view: ScaleView, path: str, clip: Dict[str, Any], owner: str) -> bool:
    """The function that clips also calls `owner.clip_grad_norm_(...)`, the wrapper's own clip:
    it chooses the clip by the wrapper (`if isinstance(m, FSDP): m.clip_grad_norm_(...) else:
    torch.nn.utils.clip_grad_norm_(...)`, or `hasattr(m, "clip_grad_norm_")`), so the torch
    clip is the branch an FSDP1 model does not take."""
    return any(
        e["f"] == clip["f"] and e.get("recv") == owner for p, e in view.events("ownclip") if p == path
    )
