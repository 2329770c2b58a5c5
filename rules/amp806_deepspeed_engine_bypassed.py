"""AMP806 deepspeed-engine-bypassed."""
from __future__ import annotations

from typing import Any, Dict, Iterator, List, Optional, Tuple

from amplint.model import (
    Diagnostic, Invalid, Rule, ScaleConfig, ScaleFinding, ScaleView, Severity, Valid, Wrapper, config_place,
    exclusive_branches, scale_file_diagnostics, scale_project_diagnostics,
)


class DeepspeedEngineBypassed(Rule):
    """
    ## What it does
    Flags a training step that goes around a DeepSpeed engine: `loss.backward()`
    on a loss computed by the engine, or `optimizer.step()` on the optimizer
    `deepspeed.initialize(...)` returned, where `engine.backward(loss)` and
    `engine.step()` must run. One finding per function, at the first bypassing
    call, with the other one and the `deepspeed.initialize` call as related
    sites.

    ## Why is this bad?
    `engine.backward(loss)` divides the loss by the gradient-accumulation steps,
    applies the fp16 loss scale and, for ZeRO stage 0/1, all-reduces the
    gradients (`_backward_epilogue` -> `allreduce_gradients`); `engine.step()`
    runs the optimizer only on accumulation boundaries, clips by the config's
    `gradient_clipping`, checks for overflow (skipping the step and lowering the
    scale), steps the scheduler and zeroes the gradients (DeepSpeed 0.19.8
    `deepspeed/runtime/engine.py`). Calling the tensor's `backward()` and the
    optimizer's `step()` skips all of it: "some preprocessing and postprocessing
    steps will be silently skipped, which can lead to incorrect results"
    (deepspeedai/DeepSpeed#7665). With fp16 the optimizer then divides
    gradients that were never scaled by the loss scale (updates about 65536x too
    small, deepspeedai/DeepSpeed#8393); without ZeRO the ranks are never
    averaged. DeepSpeed 0.18+ raises instead for fp16 and ZeRO-0
    ("Loss scaling is required ... backward() was called directly").

    ## Example
    ```python
    model, optimizer, _, _ = deepspeed.initialize(args=args, model=model, model_parameters=params)
    loss = criterion(model(x), y)
    loss.backward()
    optimizer.step()
    ```

    ## Use instead
    ```python
    loss = criterion(model(x), y)
    model.backward(loss)
    model.step()
    ```

    ## Notes
    A `loss.backward()` alone, with `engine.step()`, is reported only when the
    config the code shows runs fp16 or ZeRO stage 0 (wrong in every DeepSpeed
    release): since deepspeedai/DeepSpeed#7665 a tensor `backward()` is
    supported for bf16/fp32 with ZeRO 1-3, and with the config unknown
    amplint does not guess. `engine.scale(loss).backward()` is DeepSpeed's
    documented manual backward and is not flagged. The optimizer is read at
    the step: one rebound to a fresh `torch.optim` optimizer (a layer-wise
    distillation loop) is not the engine's. A backward or step on a branch
    taken only when DeepSpeed is not in use (the `else` of `if args.deepspeed:`
    or of `if hasattr(config, "deepspeed") and config.deepspeed.enable:`, the
    body of `if not args.use_deepspeed:` or `if ds_config is None:`) runs
    no engine and is not flagged.

    ## References
    - amplint's evidence page: `amplint --explain AMP806` (docs/evidence.md#amp806)
    - deepspeedai/DeepSpeed#7665, #8393; huggingface/accelerate#2951
    - https://www.deepspeed.ai/getting-started/#training
    """

    code = "AMP806"
    name = "deepspeed-engine-bypassed"
    severity = Severity.ERROR
    text_only = True  # reads `ast` scale summaries: no libcst parse
    message = "the step bypasses the DeepSpeed engine's backward/step"
    triggers = ("deepspeed",)
    requires = (("backward", "step("), ("initialize",))

    VALID = [
        Valid(
            """
import deepspeed
model, optimizer, _, _ = deepspeed.initialize(args=args, model=model, model_parameters=params)
for x, y in loader:
    loss = criterion(model(x), y)
    model.backward(loss)
    model.step()
""",
            "the engine's own backward and step",
        ),
        Valid(
            """
import deepspeed
engine, _, _, _ = deepspeed.initialize(model=model, config="ds.json")
loss = engine(x).sum()
engine.scale(loss).backward()
engine.step()
""",
            "DeepSpeed's manual backward: engine.scale(loss).backward()",
        ),
        Valid(
            """
import torch
import deepspeed
model, optimizer, _, _ = deepspeed.initialize(args=args, model=model, optimizer=optimizer)
for layer in model.module.layers:
    optimizer = torch.optim.AdamW(layer.parameters(), lr=1e-4)
    for x, y in loader:
        loss = torch.nn.functional.mse_loss(layer(x), y)
        loss.backward()
        optimizer.step()
""",
            "a fresh optimizer on one layer, not the engine's",
        ),
        Valid(
            """
import deepspeed
config = {"train_batch_size": 8, "bf16": {"enabled": True}, "zero_optimization": {"stage": 2}}
engine, _, _, _ = deepspeed.initialize(model=model, config=config)
loss = engine(x).sum()
loss.backward()
engine.step()
""",
            "bf16 with ZeRO-2: a tensor backward is supported (DeepSpeed#7665)",
        ),
        Valid(
            """
import deepspeed
if args.deepspeed:
    model, optimizer, _, _ = deepspeed.initialize(args=args, model=model, model_parameters=params)
for x, y in loader:
    loss = criterion(model(x), y)
    if args.deepspeed:
        model.backward(loss)
        model.step()
    else:
        loss.backward()
        optimizer.step()
""",
            "the other branch runs the plain model",
        ),
        Valid(
            """
import deepspeed
model, optimizer, _, _ = deepspeed.initialize(args=args, model=model, model_parameters=params)
models = [model]
for batch in loader:
    forward_backward(models, batch)
    if not args.deepspeed:
        optimizer.reduce_model_grads(args)
    if args.deepspeed:
        models[0].step()
    else:
        optimizer.step(args)
""",
            "the step on the branch taken only when DeepSpeed is not in use (Megatron's own optimizer)",
        ),
        Valid(
            """
import deepspeed
model, optimizer, _, _ = deepspeed.initialize(args=config, model=model, model_parameters=params)
for batch in loader:
    forward_backward(model, batch)
    if not (hasattr(config, "deepspeed") and config.deepspeed.enable):
        optimizer.step()
""",
            "a config section's switch: `config.deepspeed.enable` off, no engine",
        ),
    ]

    INVALID = [
        Invalid(
            """
import deepspeed
model, optimizer, _, _ = deepspeed.initialize(args=args, model=model, model_parameters=params)
for step, (x, y) in enumerate(loader):
    logits = model(x)
    loss = criterion(logits, y) / args.gradient_accumulation_steps
    loss.backward()
    if (step + 1) % args.gradient_accumulation_steps == 0:
        optimizer.step()
        optimizer.zero_grad()
""",
            line=6,
            count=1,
        ),
        Invalid(
            """
import deepspeed

def train(engine, optimizer, loader):
    for x in loader:
        engine.backward(engine(x).mean())
        optimizer.step()

engine, optimizer, _, _ = deepspeed.initialize(model=net, config="ds_config.json")
train(engine, optimizer, loader)
""",
            line=6,
            why="the engine's optimizer stepped directly, in a function the engine is passed to",
        ),
        Invalid(
            """
import deepspeed
config = {"train_batch_size": 16, "fp16": {"enabled": True, "loss_scale": 0}}
engine, _, _, _ = deepspeed.initialize(model=model, config=config)
loss = engine(x).sum()
loss.backward()
engine.step()
""",
            line=5,
            why="fp16: the loss is never scaled",
        ),
    ]

    def check_text(self, source: str, path: str) -> Iterator[Diagnostic]:
        yield from scale_file_diagnostics(self, source, path, self.findings)

    def check_project(self, project: Any) -> Iterator[Diagnostic]:
        yield from scale_project_diagnostics(self, project, self.findings)

    def findings(self, view: ScaleView) -> Iterator[ScaleFinding]:
        by_function: Dict[Tuple[str, str], Dict[str, Any]] = {}
        for path, e in view.events():
            if e.get("nds"):
                continue  # a branch taken only without DeepSpeed (`else` of `if args.deepspeed:`): no engine there
            if e["e"] == "back" and e.get("n") == 0 and not e.get("scaled") and e.get("recv"):
                found = _loss_engine(view, path, e)
                if found is not None:
                    e = {**e, "engine_name": found[1]}
                    by_function.setdefault((path, e["f"]), {}).setdefault("back", []).append((e, found[0]))
            elif e["e"] == "step" and e.get("recv"):
                engine = _stepped_engine(view, path, e)
                if engine is not None:
                    by_function.setdefault((path, e["f"]), {}).setdefault("step", []).append((e, engine))
        for (path, func), found in sorted(by_function.items()):
            backs = found.get("back", [])
            steps = found.get("step", [])
            engine = (backs or steps)[0][1]
            config = engine.config
            if not steps and not _tensor_backward_unsupported(config):
                continue
            first, _ = min(backs or steps, key=lambda pair: (pair[0]["r"], pair[0]["c"]))
            yield self._finding(view, path, first, backs, steps, engine, config)

    def _finding(self, view: ScaleView, path: str, first: Dict[str, Any], backs: List, steps: List, engine: Wrapper, config: Optional[ScaleConfig]) -> ScaleFinding:
        targets = engine.event.get("t") or []
        name = first.get("engine_name") or (targets[0] if targets and targets[0] and targets[0] != "_" else "engine")
        if first["e"] == "back":
            message = f"`{first['recv']}.backward()` bypasses DeepSpeed engine `{name}`: no loss scaling or reduction"
            help = f"Call `{name}.backward({first['recv']})`, then `{name}.step()`"
        else:
            message = f"`{first['recv']}.step()` bypasses DeepSpeed engine `{name}`: no clipping or overflow check"
            help = f"Call `{name}.step()`: it steps the optimizer on accumulation boundaries"
        related: List[Tuple[Any, str]] = []
        for e, _ in [*backs, *steps]:
            if e is not first:
                related.append((view.place(path, e), "also bypasses the engine"))
        related.append((engine.place, "the engine, from `deepspeed.initialize` here"))
        if config is not None and config.get("fp16") is not None:
            related.append((config_place(config, "fp16", "enabled"), "its fp16 setting"))
        data = {
            "engine": name,
            "optimizer": targets[1] if len(targets) > 1 and targets[1] else None,
            "bypassed": sorted({"backward" if e["e"] == "back" else "step" for e, _ in [*backs, *steps]}),
            "initialize_site": [engine.path, engine.event["r"]],
            "fp16_enabled": config.enabled("fp16") if config else None,
            "zero_stage": config.get("zero_optimization", "stage") if config else None,
        }
        return ScaleFinding(view.place(path, first), message, help, related, data)


def _loss_engine(view: ScaleView, path: str, back: Dict[str, Any]) -> Optional[Tuple[Wrapper, str]]:
    """The DeepSpeed engine whose forward computed the tensor `back` runs backward on (its
    value calls the engine, a few assignments up), when no `engine.backward(...)` of that
    engine can run with it."""
    func = back["f"]
    at = (back["r"], back["c"])
    loss = back["recv"]
    _, callees = view.deps(path, func, loss)
    if loss.split(".")[0] != loss or not callees:
        return None
    s = view.summary(path)
    assert s is not None
    for callee in sorted(callees):
        for w in view.wrappers_at(path, func, callee, at):
            if not w.deepspeed_engine:
                continue
            own = [e for e in s["events"] if e["e"] == "back" and e["f"] == func and e.get("recv") == callee and e.get("n", 0) >= 1]
            if own:
                # the engine's backward runs in the same pass, or the function chooses between it and
                # this one (`if args.deepspeed: model.backward(loss) else: loss.backward()`): there the
                # other branch's model is the plain one
                continue
            return w, callee
    return None


def _stepped_engine(view: ScaleView, path: str, step: Dict[str, Any]) -> Optional[Wrapper]:
    """The DeepSpeed engine whose optimizer (`deepspeed.initialize(...)[1]`) is stepped directly,
    in a function that does not step the engine itself on another branch (the non-DeepSpeed path
    of `if args.deepspeed: model.step() else: optimizer.step()`)."""
    s = view.summary(path)
    assert s is not None
    for w in view.wrappers_at(path, step["f"], step["recv"], (step["r"], step["c"])):
        if w.kind == "deepspeed" and w.element == 1:
            engines = [
                e for e in s["events"]
                if e["f"] == step["f"] and e is not step and e.get("recv") and e["e"] in ("step", "back")
                and any(x.deepspeed_engine for x in view.wrappers_at(path, step["f"], e["recv"], (e["r"], e["c"])))
            ]
            if any(exclusive_branches(e.get("p"), step.get("p")) for e in engines):
                continue
            return w
    return None


def _tensor_backward_unsupported(config: Optional[ScaleConfig]) -> bool:
    """fp16, or ZeRO stage 0, in the config the code shows: a tensor `backward()` is wrong on
    every DeepSpeed release there (unscaled loss, no all-reduce)."""
    if config is None:
        return False
    if config.enabled("fp16") is True:
        return True
    stage = config.get("zero_optimization", "stage")
    return config.get("zero_optimization") is None or stage == 0
