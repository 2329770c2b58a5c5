"""AMP807 deepspeed-static-loss-scale."""
from __future__ import annotations

from typing import Any, Iterator

from amplint.model import (
    Diagnostic, Invalid, Rule, ScaleFinding, ScaleView, Severity, Valid, config_place, scale_file_diagnostics,
    scale_project_diagnostics,
)


class DeepspeedStaticLossScale(Rule):
    """
    ## What it does
    Flags a DeepSpeed configuration that enables fp16 (`"enabled": true`, or
    `"auto"`, which the Hugging Face Trainer fills from `fp16=True`) with a
    non-zero `"loss_scale"`. The configuration is a dict literal in the code,
    a JSON file the code names (`deepspeed.initialize(config="ds.json")`,
    `TrainingArguments(deepspeed=...)`, any string literal naming a
    DeepSpeed-shaped JSON file of the project), or a DeepSpeed-shaped JSON file
    the project ships without its code naming it (launched by
    `deepspeed train.py --deepspeed_config ds.json` in a shell script, or by an
    accelerate YAML's `deepspeed_config_file`); a finding in a JSON file points
    at the key itself.

    ## Why is this bad?
    In DeepSpeed `fp16.loss_scale` 0 means dynamic loss scaling and any other
    value is a static scale that never adapts ("Default value of 0 means
    dynamic loss scaling instead of static loss scale", `DeepSpeedFP16Config`
    in DeepSpeed 0.19.8; `engine.dynamic_loss_scale()` is
    `loss_scale == 0`). A static scale never backs off: a gradient that
    overflows it makes every step whose gradients overflow skip (or, with some
    ZeRO versions, apply inf: deepspeedai/DeepSpeed#90, #138), and one that is
    too small lets small gradients underflow to zero in fp16 for the whole run
    (deepspeedai/DeepSpeed#697: a scale stuck at 1 and no learning).

    ## Example
    ```json
    {"train_batch_size": 32, "fp16": {"enabled": true, "loss_scale": 128}}
    ```

    ## Use instead
    ```json
    {"train_batch_size": 32, "fp16": {"enabled": true, "loss_scale": 0, "initial_scale_power": 16}}
    ```

    ## Notes
    Silent for `"loss_scale": 0`, for an fp16 block that is disabled, and for
    values decided at run time (`"loss_scale": args.loss_scale`, or a dict
    changed in place after it is built). A choice between literals written in
    the dict (`"loss_scale": 1 if args.disable_grad_scaler else 0`) counts when
    one of them is a static scale: the code offers that path, and on it
    nothing scales dynamically (the message says "may be"). JSON files are read only inside the
    project: when the code names them, or, in a project whose code imports
    DeepSpeed, accelerate, transformers or Lightning, when a run over the
    project's folder meets them (not excluded, not gitignored; a run over single
    files reads only those the code names: fixtures/projects/deepspeed_launch).
    They are parsed by the standard library and never executed
    (amplint/model/project/configs.py).

    ## References
    - amplint's evidence page: `amplint --explain AMP807` (docs/evidence.md#amp807)
    - deepspeedai/DeepSpeed#697, #90, #138, #7889
    - https://www.deepspeed.ai/docs/config-json/#fp16-training-options
    """

    code = "AMP807"
    name = "deepspeed-static-loss-scale"
    severity = Severity.WARNING
    text_only = True  # reads `ast` scale summaries: no libcst parse
    message = "a DeepSpeed fp16 config with a static loss scale"
    #: the per-file pass reads dict literals only (JSON files are read by the project pass, which
    #: gates on the text index's role "d"): a literal `"loss_scale"` next to an fp16 block
    triggers = ("loss_scale",)
    requires = (("fp16",),)

    VALID = [
        Valid(
            """
import deepspeed
config = {"train_batch_size": 8, "fp16": {"enabled": True, "loss_scale": 0, "loss_scale_window": 1000}}
engine, _, _, _ = deepspeed.initialize(model=model, config=config)
""",
            "loss_scale 0: dynamic scaling",
        ),
        Valid(
            """
import deepspeed
config = {"train_batch_size": 8, "fp16": {"enabled": False, "loss_scale": 128}}
""",
            "fp16 disabled",
        ),
        Valid(
            """
import deepspeed
config = {"train_batch_size": 8, "fp16": {"enabled": True, "loss_scale": args.loss_scale}}
""",
            "the scale is decided at run time",
        ),
        Valid(
            """
config = {"train_batch_size": 8, "fp16": {"enabled": True, "loss_scale": 128}}
config["fp16"]["loss_scale"] = 0
""",
            "changed in place after it is built",
        ),
        Valid(
            """
import deepspeed
config = {"train_batch_size": 8, "fp16": {"enabled": True, "loss_scale": 0 if args.dynamic else args.loss_scale}}
""",
            "a choice whose other side is decided at run time: no literal static scale",
        ),
    ]

    INVALID = [
        Invalid(
            """
import deepspeed
ds_config = {
    "train_batch_size": 64,
    "fp16": {"enabled": True, "loss_scale": 1024},
}
engine, _, _, _ = deepspeed.initialize(model=model, config=ds_config)
""",
            line=4,
        ),
        Invalid(
            """
from transformers import TrainingArguments
args = TrainingArguments("out", fp16=True, deepspeed={"train_micro_batch_size_per_gpu": "auto", "fp16": {"enabled": "auto", "loss_scale": 128}})
""",
            line=2,
            why='"auto": the Trainer enables it with fp16=True',
        ),
        Invalid(
            """
def get_config():
    return {
        "train_micro_batch_size_per_gpu": 4,
        "fp16": {
            "enabled": True,
            "loss_scale": 65536.0,
        },
    }
""",
            line=6,
        ),
        Invalid(
            """
import deepspeed
def build_ds_config(config, args):
    return {
        "train_micro_batch_size_per_gpu": config.batch_size,
        "fp16": {"enabled": True, "auto_cast": True, "loss_scale": 1 if args.disable_grad_scaler else 0},
    }
""",
            line=5,
            why="a choice between literals, one of them static (InternImage main_deepspeed.py)",
        ),
    ]

    def check_text(self, source: str, path: str) -> Iterator[Diagnostic]:
        yield from scale_file_diagnostics(self, source, path, self.findings)

    def check_project(self, project: Any) -> Iterator[Diagnostic]:
        yield from scale_project_diagnostics(self, project, self.findings)

    def findings(self, view: ScaleView) -> Iterator[ScaleFinding]:
        for config in view.deepspeed_configs():
            fp16 = config.get("fp16")
            if not isinstance(fp16, dict):
                continue
            enabled = fp16.get("enabled")
            if not (enabled is True or (isinstance(enabled, str) and enabled.lower() in ("true", "auto"))):
                continue
            scale = fp16.get("loss_scale")
            maybe = False
            if scale == "?":  # `1 if args.disable_grad_scaler else 0`: a literal non-zero one of the values
                static = [v for v in config.choices.get(("fp16", "loss_scale"), ()) if _static(v)]
                scale, maybe = (static[0], True) if static else (None, False)
            if not _static(scale):
                continue
            place = config_place(config, "fp16", "loss_scale")
            shown = int(scale) if float(scale).is_integer() else scale
            if maybe:
                message = f'`"loss_scale"` may be {shown} with DeepSpeed fp16: on that path a static scale that never backs off'
            else:
                message = f'`"loss_scale": {shown}` with DeepSpeed fp16 is a static scale: it never backs off'
            help = 'Set `"loss_scale": 0` (dynamic) and tune `"initial_scale_power"` instead'
            related = [(config.named_at, "named here")] if config.named_at else []
            data = {"loss_scale": scale, "fp16_enabled": enabled, "config": "literal" if config.literal else config.path, "run_time_choice": maybe}
            yield ScaleFinding(place, message, help, related, data, config_file=not config.literal)


def _static(value: object) -> bool:
    """A number other than 0 (DeepSpeed's "dynamic"): a static loss scale."""
    return not isinstance(value, bool) and isinstance(value, (int, float)) and value != 0
