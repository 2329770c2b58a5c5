"""AMP805 deepspeed-torch-clip."""
from __future__ import annotations

from typing import Any, Dict, Iterator, List, Optional, Tuple

from amplint.model import (
    Diagnostic, Invalid, Rule, ScaleConfig, ScaleFinding, ScaleView, Severity, Valid, Wrapper, clip_owner_of,
    config_place, deepspeed_engine_calls, deepspeed_run_time_engine, scale_file_diagnostics,
    scale_project_diagnostics, torch_scaler_pass,
)


class DeepspeedTorchClip(Rule):
    """
    ## What it does
    Flags `torch.nn.utils.clip_grad_norm_` / `clip_grad_value_` on the
    parameters of a DeepSpeed engine (the first result of
    `deepspeed.initialize(...)`, its `.module`, or the model handed to it),
    followed across files like AMP801's wrappers.

    ## Why is this bad?
    DeepSpeed clips inside its own optimizers, configured by
    `"gradient_clipping"` in the DeepSpeed config (a DeepSpeed maintainer,
    deepspeedai/DeepSpeed#6767; `engine._take_model_step` in DeepSpeed 0.19.8
    clips fp32 gradients itself and leaves fp16/bf16/ZeRO clipping to their
    optimizers). A torch clip next to the engine does not do that job: under
    ZeRO-2/3 `p.grad` is partitioned or `None` on the engine's parameters, so
    the clip sees no or partial gradients; in fp16 the engine's `backward`
    scaled the loss, so the clip sees gradients multiplied by the loss scale
    (AMP101's physics); and clipping configured only this way is silently
    absent where it matters (mlcommons/training#723, axolotl-ai-cloud/axolotl#1381).

    ## Example
    ```python
    engine, optimizer, _, _ = deepspeed.initialize(model=model, config="ds_config.json")
    engine.backward(loss)
    torch.nn.utils.clip_grad_norm_(engine.parameters(), 1.0)
    engine.step()
    ```

    ## Use instead
    ```python
    # ds_config.json: "gradient_clipping": 1.0
    engine.backward(loss)
    engine.step()
    ```

    ## Notes
    Silent when the configuration the code shows is fp32 with ZeRO stage 0 or
    1 (gradients are whole, reduced and unscaled there, and the torch clip does
    clip them), for an engine the code does not show (`deepspeed.initialize`
    behind a custom backend chosen at run time), and for a clip on a branch
    taken only without DeepSpeed: the `else` of `if args.deepspeed:` or of `if
    train_engine == "deepspeed":`, under `if train_engine != "deepspeed":`
    (the model handed to the clip there is the DDP or FSDP one, even where the
    same function receives the engine on the DeepSpeed branch), also spelled as
    a config section's switch (`else` of `if hasattr(config, "deepspeed") and
    config.deepspeed.enable:`) or told by the other branch calling the engine's
    own `backward(loss)`/`step()`. Silent too where the model is an engine only
    by a run-time choice (a setup function returning the engine or the DDP
    model) and the clip's pass is torch AMP's (`scaler.scale(loss).backward()`,
    which a DeepSpeed engine does not take) with no engine call. The finding names the
    `deepspeed.initialize` call and, when the config is known, its
    `gradient_clipping` entry.

    ## References
    - amplint's evidence page: `amplint --explain AMP805` (docs/evidence.md#amp805)
    - deepspeedai/DeepSpeed#6767, #656; axolotl-ai-cloud/axolotl#1381; mlcommons/training#723
    - https://www.deepspeed.ai/docs/config-json/#gradient-clipping
    """

    code = "AMP805"
    name = "deepspeed-torch-clip"
    severity = Severity.WARNING
    text_only = True  # reads `ast` scale summaries: no libcst parse
    message = "a torch clip on a DeepSpeed engine's parameters bypasses DeepSpeed's clipping"
    triggers = ("clip_grad",)
    requires = (("deepspeed",), ("initialize",))

    VALID = [
        Valid(
            """
import deepspeed
engine, optimizer, _, _ = deepspeed.initialize(model=model, config={"train_batch_size": 8, "gradient_clipping": 1.0, "fp16": {"enabled": True}})
loss = engine(x).sum()
engine.backward(loss)
engine.step()
""",
            "clipping through the config",
        ),
        Valid(
            """
import torch
import deepspeed
config = {"train_batch_size": 8, "zero_optimization": {"stage": 1}}
engine, optimizer, _, _ = deepspeed.initialize(model=model, config=config)
engine.backward(engine(x).sum())
torch.nn.utils.clip_grad_norm_(engine.parameters(), 1.0)
engine.step()
""",
            "fp32, ZeRO-1: whole, unscaled gradients",
        ),
        Valid(
            """
import torch
import deepspeed
engine, optimizer, _, _ = deepspeed.initialize(model=model, config="ds.json")
other = Net()
torch.nn.utils.clip_grad_norm_(other.parameters(), 1.0)
""",
            "another model's parameters",
        ),
        Valid(
            """
import torch
from torch.nn.utils import clip_grad_norm_
if using_deepspeed:
    backend.backward(loss)
    backend.step()
else:
    loss.backward()
    clip_grad_norm_(model.parameters(), 0.5)
""",
            "no engine the code shows",
        ),
        Valid(
            """
import torch
import deepspeed
from torch.nn.utils import clip_grad_norm_


def init(args, model, optimizer):
    if args.train_engine == "deepspeed":
        model, optimizer, _, _ = deepspeed.initialize(args=args, model=model, optimizer=optimizer)
    return model, optimizer


def update(model, optimizer, info):
    train_engine = info.get("train_engine", "torch_ddp")
    if train_engine == "deepspeed":
        model.step()
    else:
        clip_grad_norm_(model.parameters(), 5.0)
        optimizer.step()


def main(args, net, opt, info):
    model, optimizer = init(args, net, opt)
    update(model, optimizer, info)
""",
            "the blind drill (wenet): the clip is on the branch taken without DeepSpeed (the DDP model)",
        ),
        Valid(
            """
import torch
import deepspeed


def setup_model(config, model, params):
    if hasattr(config, "deepspeed") and config.deepspeed.enable:
        model, optimizer, _, _ = deepspeed.initialize(args=config, model=model, model_parameters=params)
    else:
        model = torch.nn.parallel.DistributedDataParallel(model)
        optimizer = torch.optim.AdamW(model.parameters())
    return model, optimizer


def train(config, net, params, loader):
    model, optimizer = setup_model(config, net, params)
    for x in loader:
        loss = model(x).sum()
        if hasattr(config, "deepspeed") and config.deepspeed.enable:
            model.backward(loss)
            model.step()
        else:
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
""",
            "the blind drill (InternVideo): the clip in the `else` of `config.deepspeed.enable` (the DDP model)",
        ),
        Valid(
            """
import torch
import deepspeed
if args.zero_stage > 0:
    model, optimizer, _, _ = deepspeed.initialize(args=args, model=model, model_parameters=params)
for x in loader:
    loss = model(x).sum()
    if args.zero_stage > 0:
        model.backward(loss)
        model.step()
    else:
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
""",
            "the engine's own backward and step on the other branch: the clip's model is the plain one",
        ),
        Valid(
            """
import torch
import deepspeed


def setup_model(config, model, params):
    if config.deepspeed.enable:
        model, optimizer, _, _ = deepspeed.initialize(args=config, model=model, model_parameters=params)
        scaler = None
    else:
        model = torch.nn.parallel.DistributedDataParallel(model)
        optimizer = torch.optim.AdamW(model.parameters())
        scaler = torch.cuda.amp.GradScaler()
    return model, optimizer, scaler


def train(config, net, params, loader):
    model, optimizer, scaler = setup_model(config, net, params)
    for x in loader:
        with torch.autocast("cuda", dtype=torch.float16):
            loss = model(x).sum()
        scaler.scale(loss).backward()
        scaler.unscale_(optimizer)
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        scaler.step(optimizer)
        scaler.update()
""",
            "the blind drill (InternVideo's retrieval_mc): an engine only by config, the clip on torch AMP's GradScaler pass",
        ),
    ]

    INVALID = [
        Invalid(
            """
import torch
import deepspeed
engine, optimizer, _, _ = deepspeed.initialize(model=model, config="ds_config.json")
loss = engine(x).sum()
engine.backward(loss)
torch.nn.utils.clip_grad_norm_(engine.parameters(), 1.0)
engine.step()
""",
            line=6,
        ),
        Invalid(
            """
import torch
import deepspeed
engine, optimizer, _, _ = deepspeed.initialize(model=model, config="ds_config.json")
engine = torch.compile(engine)
loss = engine(x).sum()
engine.backward(loss)
torch.nn.utils.clip_grad_norm_(engine.parameters(), 1.0)
engine.step()
""",
            line=7,
            why="the engine compiled: the same parameters, the engine's own clipping bypassed",
        ),
        Invalid(
            """
import torch
import deepspeed

class Trainer:
    def __init__(self, args, net):
        self.engine, self.optimizer, _, _ = deepspeed.initialize(args=args, model=net, model_parameters=net.parameters())

    def step(self, batch):
        loss = self.engine(batch)
        self.engine.backward(loss)
        torch.nn.utils.clip_grad_value_(self.engine.module.parameters(), 0.5)
        self.engine.step()
""",
            line=11,
            why="`self.engine.module`, clipped by value",
        ),
        Invalid(
            """
import torch
import deepspeed
ds_config = {"train_micro_batch_size_per_gpu": 4, "fp16": {"enabled": True}, "zero_optimization": {"stage": 2}}
model_engine, _, _, _ = deepspeed.initialize(model=model, config=ds_config)
model_engine.backward(loss)
torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
model_engine.step()
""",
            line=6,
            why="the module handed to `deepspeed.initialize`: its parameters are the engine's",
        ),
        Invalid(
            """
import torch
import deepspeed
if config.deepspeed.enable:
    model, optimizer, _, _ = deepspeed.initialize(args=config, model=model, model_parameters=params)
else:
    model = torch.nn.parallel.DistributedDataParallel(model)
for x in loader:
    loss = model(x).sum()
    if config.deepspeed.enable:
        model.backward(loss)
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        model.step()
    else:
        loss.backward()
        optimizer.step()
""",
            line=11,
            why="an engine by config, clipped on the engine's own branch (after `model.backward(loss)`)",
        ),
    ]

    def check_text(self, source: str, path: str) -> Iterator[Diagnostic]:
        yield from scale_file_diagnostics(self, source, path, self.findings)

    def check_project(self, project: Any) -> Iterator[Diagnostic]:
        yield from scale_project_diagnostics(self, project, self.findings)

    def findings(self, view: ScaleView) -> Iterator[ScaleFinding]:
        for path, clip in view.events("clip"):
            if clip.get("nds"):
                continue  # a branch taken only without DeepSpeed (`else` of `if engine == "deepspeed":`): no engine there
            owner = clip_owner_of(view, path, clip)
            if owner is None:
                continue
            engine = _engine(view, path, clip, owner)
            if engine is None or _whole_unscaled_gradients(engine.config):
                continue
            names = [owner, owner[: -len(".module")]] if owner.endswith(".module") else [owner]
            on, off = deepspeed_engine_calls(view, path, clip, names)
            if off and not on:
                continue  # the engine's own backward/step on the other branch: the clip's is the plain model's
            if not on and deepspeed_run_time_engine(view, path, clip, owner, engine) and torch_scaler_pass(view, path, clip, names):
                continue  # an engine only by a run-time choice, and the clip's pass is torch AMP's (GradScaler)
            spelled = clip.get("spelled") or "clip_grad_norm_"
            message = f"`{spelled}` on DeepSpeed engine `{owner}` bypasses the engine's own clipping"
            limit = clip.get("lim") or "1.0"
            help = f'Set `"gradient_clipping": {limit}` in the DeepSpeed config and drop the torch clip'
            related: List[Tuple[Any, str]] = [(engine.place, "the engine, from `deepspeed.initialize` here")]
            config = engine.config
            if config is not None:
                if config.get("gradient_clipping") is not None:
                    related.append((config_place(config, "gradient_clipping"), "DeepSpeed's own clipping"))
                else:
                    related.append((config_place(config), "its config (no `gradient_clipping`)"))
            data = {
                "engine": owner, "clip_function": spelled, "limit": clip.get("lim"), "wrapper": "deepspeed",
                "initialize_site": [engine.path, engine.event["r"]], **_config_data(config),
            }
            yield ScaleFinding(view.place(path, clip), message, help, related, data)


def _engine(view: ScaleView, path: str, clip: Dict[str, Any], owner: str) -> Optional[Wrapper]:
    """The DeepSpeed engine whose parameters `owner` names: the engine, its `.module`, or the
    module handed to `deepspeed.initialize(model=...)` before the clip in the same function."""
    at = (clip["r"], clip["c"])
    names = [owner]
    if owner.endswith(".module"):
        names.append(owner[: -len(".module")])
    for name in names:
        for w in view.wrappers_at(path, clip["f"], name, at):
            if w.deepspeed_engine:
                return w
    s = view.summary(path)
    for e in s["events"] if s else ():
        if e["e"] == "wrap" and e["k"] == "deepspeed" and e["f"] == clip["f"] and e.get("s") == owner and (e["r"], e["c"]) < at:
            return view._wrapper(path, e, 0)
    return None


def _whole_unscaled_gradients(config: Optional[ScaleConfig]) -> bool:
    """fp32 with ZeRO stage 0/1, as the config the code shows says: a torch clip does clip there."""
    if config is None:
        return False
    if config.enabled("fp16") is not False and config.get("fp16") is not None:
        return False
    if config.enabled("bf16") is not False and config.get("bf16") is not None:
        return False
    stage = config.get("zero_optimization", "stage")
    if config.get("zero_optimization") is not None and stage is None:
        return False  # a ZeRO block without a stage the code shows
    return stage in (None, 0, 1)


def _config_data(config: Optional[ScaleConfig]) -> Dict[str, Any]:
    """What the verifier would need to rebuild the engine's precision (plain JSON)."""
    if config is None:
        return {"config": None}
    return {
        "config": config.path if not config.literal else "literal",
        "fp16_enabled": config.enabled("fp16"),
        "bf16_enabled": config.enabled("bf16"),
        "zero_stage": config.get("zero_optimization", "stage"),
        "loss_scale": config.get("fp16", "loss_scale"),
        "gradient_clipping": config.get("gradient_clipping"),
    }
