"""AMP808 precision-config-conflict."""
from __future__ import annotations

import os
import re

from typing import Any, Dict, Iterator, List, Optional, Set, Tuple

from amplint.model import (
    Diagnostic, Invalid, Rule, ScaleConfig, ScaleFinding, ScaleView, Severity, Valid, config_place,
    command_line_bool, lightning_precision_dtype, scale_file_diagnostics, scale_project_diagnostics,
)

_OTHER = {"fp16": "bf16", "bf16": "fp16"}


class PrecisionConfigConflict(Rule):
    """
    ## What it does
    Flags mixed precision configured twice, in conflict:

    - a `GradScaler` built for the training step of a DeepSpeed engine whose
      config enables fp16;
    - one DeepSpeed config enabling both `fp16` and `bf16` (a dict literal, a
      JSON file the code names, or one the project ships without naming it,
      read as AMP807 reads it);
    - `Accelerator(mixed_precision="fp16")` (or `"bf16"`) with a
      `DeepSpeedPlugin(hf_ds_config=...)` whose config enables the other
      dtype, and an accelerate config YAML (one the code names, a launch
      command starts, or the project ships: accelerate is launched with it)
      whose `mixed_precision` disagrees with the DeepSpeed JSON its
      `deepspeed_config_file` points to (reported in the YAML; a YAML the
      walk meets is read only in a project that imports accelerate,
      transformers or DeepSpeed, and only when it names a
      `deepspeed_config_file` next to `mixed_precision` and
      `distributed_type`);
    - `TrainingArguments(fp16=..., bf16=..., deepspeed=...)` whose flags
      disagree with an explicit `fp16.enabled` / `bf16.enabled` of the
      DeepSpeed config (not `"auto"`);
    - a Lightning `Trainer` whose `precision` is fp16 (bf16) next to the
      `DeepSpeedStrategy(config=...)` its function builds, whose config
      enables bf16 (fp16) and not the Trainer's dtype: a literal precision, or
      one read from a command-line option (`precision=args.precision`,
      `**vars(args)`, or a dict built from `vars(args).items()` filtered by a
      literal key list), whose values are its default, its choices and the
      literals the code compares it to, less those an `if` refuses along
      with DeepSpeed (`if args.precision == "16" and
      args.deepspeed_config_path: raise`); the config a literal, a file the
      code names, or, for a path the command line gives, the DeepSpeed JSON
      files the project ships (a warning when the precision is not the
      option's default);
    - the same conflicts written in a launch command the project ships (a
      shell script, a Makefile, a README command block):
      `accelerate launch --mixed_precision fp16` with a DeepSpeed config
      enabling bf16 (its `--deepspeed_config_file`, or the one its
      `--config_file` YAML points to), a launched accelerate YAML whose
      `mixed_precision` disagrees with its DeepSpeed config (reported once, in
      the YAML, when the command line states no precision of its own), and
      `--fp16` / `--bf16` passed to a script that parses its
      `TrainingArguments` with `HfArgumentParser` next to a `--deepspeed
      ds.json` whose explicit `enabled` disagrees. Reported in the launcher,
      at the option.

    ## Why is this bad?
    Each of these fails at start-up, after the job got its GPUs:
    DeepSpeed casts an fp16 engine's parameters to fp16, so a GradScaler's
    `unscale_` raises `ValueError: Attempting to unscale FP16 gradients`;
    DeepSpeed asserts "bfloat16 and fp16 modes cannot be simultaneously
    enabled" (`deepspeed/runtime/config.py`, 0.19.8); accelerate raises
    "`--mixed_precision` arg cannot be set to `fp16` when `bf16` is set in the
    DeepSpeed config file" (`DeepSpeedPlugin.set_mixed_precision`, accelerate
    1.15.0); the Trainer raises "Please correct the following DeepSpeed config
    values that mismatch TrainingArguments values: - ds fp16.enabled=True vs hf
    fp16|fp16_full_eval=False" (`HfTrainerDeepSpeedConfig.fill_match`,
    transformers 5.24.0); Lightning's `DeepSpeedStrategy` adds an `fp16` (or
    `bf16`) block for its precision only when the config has none
    (`_format_precision_config`), so a config with `"fp16": {"enabled": false}`
    and bf16 enabled runs a bf16 engine while `DeepSpeedPrecision("16-mixed")`
    casts every input batch to fp16 (and a config without the block gets both
    enabled: DeepSpeed refuses to start). A run that gets past them trains in a precision
    nobody chose (huggingface/accelerate#3197: `BFloat16 != Half`).

    ## Example
    ```python
    args = TrainingArguments("out", bf16=True, deepspeed="ds_config.json")  # ds_config.json: "fp16": {"enabled": true}
    ```

    ## Use instead
    ```python
    args = TrainingArguments("out", bf16=True, deepspeed="ds_config.json")  # "fp16": {"enabled": "auto"}, "bf16": {"enabled": "auto"}
    ```

    ## Notes
    Silent where a side is decided at run time (`fp16=args.fp16`,
    `mixed_precision=args.mixed_precision`, `**kwargs`, `"auto"`, a launcher
    word holding a shell expansion: `--bf16 $BF16`, `$DIR/train.py`), for a
    launch command whose script or config does not name exactly one project
    file (tried next to the launcher, in the folders above it, at the
    project root), for a
    `--fp16` / `--bf16` on a script that does not use `HfArgumentParser`
    (its own argparse flags mean what it says), for a
    GradScaler next to a bf16 or fp32 engine (it refuses only fp16 gradients)
    or built only on a branch taken without DeepSpeed (the `else` of `if
    config.deepspeed.enable:`, beside a setup that returns the engine or the
    DDP model),
    and for an fp16 autocast around an engine's forward (DeepSpeed switches it
    off inside the engine; evaluation code does this on purpose). An
    accelerate YAML whose `mixed_precision` agrees with its DeepSpeed JSON
    is silent: the precisions do not conflict. accelerate refuses it all
    the same, and this is decided, not missed: when the command line gives
    no `--mixed_precision`, `accelerate launch` takes the YAML's (any
    value but null, `"no"` included) and adds `mixed_precision` to
    `ACCELERATE_CONFIG_DS_FIELDS` (`commands/launch.py`, `launch_command`),
    and the `DeepSpeedPlugin` the `Accelerator` builds from a
    `deepspeed_config_file` raises "When using `deepspeed_config_file`, the
    following accelerate config variables will be ignored"
    (`DeepSpeedPlugin._deepspeed_config_checks`, from `__post_init__`,
    before any precision is compared; accelerate 0.16 to 1.16). That is a
    config-layout error named in one message at start-up, not a precision
    conflict: left to accelerate. A disagreeing YAML stops there too, first
    with that message, and is reported because its precisions conflict as
    well (fixing the layout alone would then hit "`--mixed_precision` arg
    cannot be set").

    ## References
    - amplint's evidence page: `amplint --explain AMP808` (docs/evidence.md#amp808)
    - huggingface/transformers#39849; shibing624/MedicalGPT#191, #288; huggingface/accelerate#3197
    - haotian-liu/LLaVA#294 (a GradScaler on a DeepSpeed fp16 engine); Snowflake-AI-Research/Arctic-Platform#78
    """

    code = "AMP808"
    name = "precision-config-conflict"
    severity = Severity.ERROR
    text_only = True  # reads `ast` scale summaries: no libcst parse
    message = "mixed precision is configured twice, in conflict"
    #: the per-file pass reads dict literals and constructors only (config files are the project
    #: pass's): DeepSpeed named or a DeepSpeed-shaped dict, and a precision word
    triggers = ("deepspeed", "DeepSpeed", "train_batch_size", "train_micro_batch_size", "zero_optimization")
    requires = (("fp16", "bf16"),)
    gate_regex = re.compile(r"initialize\s*\(|DeepSpeedPlugin\s*\(|deepspeed\s*=|zero_optimization|train_(?:micro_)?batch_size")

    VALID = [
        Valid(
            """
from transformers import TrainingArguments
args = TrainingArguments("out", bf16=True, deepspeed={"train_batch_size": "auto", "bf16": {"enabled": "auto"}, "fp16": {"enabled": "auto"}})
""",
            '"auto": the Trainer fills the DeepSpeed values from its flags',
        ),
        Valid(
            """
from transformers import TrainingArguments
args = TrainingArguments("out", fp16=True, deepspeed={"train_batch_size": 8, "fp16": {"enabled": True}})
""",
            "both say fp16",
        ),
        Valid(
            """
import torch
import deepspeed
config = {"train_batch_size": 8, "bf16": {"enabled": True}}
engine, optimizer, _, _ = deepspeed.initialize(model=model, config=config)
scaler = torch.amp.GradScaler("cuda")
loss = engine(x).sum()
""",
            "bf16 engine: its gradients are not fp16",
        ),
        Valid(
            """
from accelerate import Accelerator, DeepSpeedPlugin
plugin = DeepSpeedPlugin(hf_ds_config={"train_batch_size": 8, "bf16": {"enabled": True}})
accelerator = Accelerator(mixed_precision=args.mixed_precision, deepspeed_plugin=plugin)
""",
            "accelerate's precision decided at run time",
        ),
        Valid(
            """
import lightning as L
from lightning.pytorch.strategies import DeepSpeedStrategy
strategy = DeepSpeedStrategy(config={"train_batch_size": 8, "zero_optimization": {"stage": 2}})
trainer = L.Trainer(precision="16-mixed", strategy=strategy)
""",
            "a config with no precision block: Lightning adds the Trainer's",
        ),
        Valid(
            """
import torch
import deepspeed
ds_config = {"train_batch_size": 8, "fp16": {"enabled": True}}
if hasattr(config, "deepspeed") and config.deepspeed.enable:
    model, optimizer, _, _ = deepspeed.initialize(model=model, config=ds_config)
    scaler = None
else:
    model = torch.nn.parallel.DistributedDataParallel(model)
    scaler = torch.cuda.amp.GradScaler()
loss = model(x).sum()
""",
            "the GradScaler built only without DeepSpeed (InternVideo's setup_model): it meets the DDP model",
        ),
    ]

    INVALID = [
        Invalid(
            """
import torch
import deepspeed
config = {"train_batch_size": 8, "fp16": {"enabled": True}}
engine, optimizer, _, _ = deepspeed.initialize(model=model, config=config)
scaler = torch.cuda.amp.GradScaler()
loss = engine(x).sum()
scaler.scale(loss).backward()
""",
            line=5,
        ),
        Invalid(
            """
ds_config = {
    "train_batch_size": 8,
    "fp16": {"enabled": True},
    "bf16": {"enabled": True},
}
""",
            line=4,
        ),
        Invalid(
            """
from accelerate import Accelerator, DeepSpeedPlugin
plugin = DeepSpeedPlugin(hf_ds_config={"train_batch_size": 8, "bf16": {"enabled": True}})
accelerator = Accelerator(mixed_precision="fp16", deepspeed_plugin=plugin)
""",
            line=3,
        ),
        Invalid(
            """
from transformers import TrainingArguments
config = {"train_micro_batch_size_per_gpu": "auto", "fp16": {"enabled": True}}
args = TrainingArguments(output_dir="out", bf16=True, deepspeed=config)
""",
            line=3,
        ),
        Invalid(
            """
import lightning as L
from lightning.pytorch.strategies import DeepSpeedStrategy
strategy = DeepSpeedStrategy(config={"train_batch_size": 8, "fp16": {"enabled": False}, "bf16": {"enabled": True}})
trainer = L.Trainer(precision="16-mixed", strategy=strategy)
""",
            line=3,
            why="Lightning's fp16 precision casts the inputs to fp16; the config's engine runs bf16",
        ),
    ]

    def check_text(self, source: str, path: str) -> Iterator[Diagnostic]:
        yield from scale_file_diagnostics(self, source, path, self.findings)

    def check_project(self, project: Any) -> Iterator[Diagnostic]:
        yield from scale_project_diagnostics(self, project, self.findings)

    def findings(self, view: ScaleView) -> Iterator[ScaleFinding]:
        reported: Set[Any] = set()

        def once(f: Optional[ScaleFinding]) -> Iterator[ScaleFinding]:
            if f is not None and f.place not in reported:
                reported.add(f.place)
                yield f

        for config in view.deepspeed_configs():
            yield from once(self._both_enabled(config))
        for path, e in view.events("ctor"):
            if e["k"] == "scaler" and e.get("en") is not False and not e.get("nds"):
                # (a GradScaler built only without DeepSpeed, the `else` of `if config.deepspeed.enable:`, meets no engine)
                yield from once(self._scaler(view, path, e))
            elif e["k"] == "accelerator":
                yield from once(self._accelerator(view, path, e))
            elif e["k"] == "trainargs":
                yield from once(self._training_arguments(view, path, e))
            elif e["k"] == "trainer":
                yield from once(self._lightning_deepspeed(view, path, e))
        for config, named in view.named_configs(_accelerate_shaped):
            yield from once(self._accelerate_yaml(view, config, named))
        for launch in view.launches():
            for found in self._launcher(view, launch):
                yield from once(found)
        for config in view.shipped_accelerate_configs():
            yield from once(self._accelerate_yaml(view, config, None))

    # ------------------------------------------------------------------ shapes

    def _both_enabled(self, config: ScaleConfig) -> Optional[ScaleFinding]:
        if config.enabled("fp16") is not True or config.enabled("bf16") is not True:
            return None
        block = "bf16" if config.get("bf16") is not None else "bfloat16"
        place = config_place(config, block, "enabled")
        message = "this DeepSpeed config enables both fp16 and bf16: DeepSpeed refuses to start"
        help = "Enable one of `fp16` / `bf16` (or set both to `\"auto\"` under the Hugging Face Trainer)"
        related = [(config_place(config, "fp16", "enabled"), "fp16 enabled here")]
        data = {"conflict": "fp16+bf16", "config": "literal" if config.literal else config.path}
        return ScaleFinding(place, message, help, related, data, config_file=not config.literal)

    def _scaler(self, view: ScaleView, path: str, e: Dict[str, Any]) -> Optional[ScaleFinding]:
        s = view.summary(path)
        assert s is not None
        target = (e.get("t") or ["scaler"])[0] or "scaler"
        funcs = [e["f"]]
        cls = view._class_of(path, e["f"])
        if target.startswith("self.") and cls:
            funcs = [q for q in s["functions"] if q.startswith(f"{cls}.")]
        for func in funcs:
            for spelled in s["uses"].get(func, ()):
                name = spelled[: -len(".parameters")] if spelled.endswith(".parameters") else spelled
                for w in view.wrappers(path, func, name):
                    if not w.deepspeed_engine or w.config is None or w.config.enabled("fp16") is not True:
                        continue
                    message = f"`{target}` GradScaler on DeepSpeed fp16 engine `{name}`: its fp16 gradients cannot be unscaled"
                    help = "Drop the GradScaler: DeepSpeed's fp16 engine scales the loss itself (`engine.backward(loss)`)"
                    related = [(w.place, "the engine, from `deepspeed.initialize` here"), (config_place(w.config, "fp16", "enabled"), "fp16 enabled here")]
                    data = {"conflict": "gradscaler+deepspeed-fp16", "engine": name, "scaler": target}
                    return ScaleFinding(view.place(path, e), message, help, related, data)
        return None

    def _accelerator(self, view: ScaleView, path: str, e: Dict[str, Any]) -> Optional[ScaleFinding]:
        mp = e.get("mp")
        if mp not in ("fp16", "bf16") or not e.get("ds") or e.get("star"):
            return None
        plugins = _plugin_configs(view, path, e["f"], e["ds"])
        for config in plugins:
            if config.enabled(_OTHER[mp]) is True:
                r = e.get("mpr") or e
                place = (path, r["r"], r["c"], r["er"], r["ec"])
                message = f'`Accelerator(mixed_precision="{mp}")` with a DeepSpeed config enabling {_OTHER[mp]}: accelerate raises'
                help = f'Make them agree: set the DeepSpeed config\'s `{_OTHER[mp]}.enabled` to false (or "auto")'
                related = [(config_place(config, _OTHER[mp], "enabled"), f"{_OTHER[mp]} enabled here")]
                data = {"conflict": f"accelerate-{mp}+deepspeed-{_OTHER[mp]}"}
                return ScaleFinding(place, message, help, related, data)
        return None

    def _training_arguments(self, view: ScaleView, path: str, e: Dict[str, Any]) -> Optional[ScaleFinding]:
        if e.get("star") or e.get("cfg") is None:
            return None
        config = view.config(path, e["f"], e["cfg"])
        if config is None:
            return None
        for block in ("fp16", "bf16"):
            hf = e.get(block)
            ds = config.enabled(block)
            if hf is None or ds is None or hf == ds:
                continue
            r = e.get(f"{block}r") or e.get(f"{_OTHER[block]}r") or e
            place = (path, r["r"], r["c"], r["er"], r["ec"])
            runs = "fp16" if e.get("fp16") else "bf16" if e.get("bf16") else "fp32"
            message = f"`TrainingArguments` runs {runs} but the DeepSpeed config sets `{block}.enabled: {str(ds).lower()}`"
            help = f'Set the DeepSpeed config\'s `{block}.enabled` to "auto": the Trainer fills it from its flags'
            related = [(config_place(config, block, "enabled"), f"{block}.enabled set here")]
            data = {"conflict": f"trainer-{block}", "hf": hf, "deepspeed": ds, "config": "literal" if config.literal else config.path}
            return ScaleFinding(place, message, help, related, data)
        return None

    def _lightning_deepspeed(self, view: ScaleView, path: str, e: Dict[str, Any]) -> Optional[ScaleFinding]:
        """A Lightning `Trainer` whose precision is fp16 (bf16) next to the `DeepSpeedStrategy`
        its function builds, whose config enables bf16 (fp16) and not the Trainer's dtype: the
        engine runs the config's dtype (Lightning adds its own block only when the config has
        none, and a second enabled block makes DeepSpeed refuse to start) while Lightning's
        DeepSpeed precision casts the inputs to the Trainer's. The precision is a literal, or
        the values its command-line option may take (`option_values`); the config a literal,
        a file the code names, or -- when the strategy takes a path from the command line --
        the DeepSpeed JSON files the project ships."""
        if isinstance(e.get("strategy"), dict) and "s" in e["strategy"] and not e["strategy"]["s"].lower().startswith("deepspeed"):
            return None
        option_place = None
        if e.get("prec") not in (None, "?"):
            values: List[Tuple[Any, bool]] = [(e["prec"], True)]
        elif e.get("popt"):
            found = view.option_values(path, e["popt"])
            if found is None:
                return None
            values, option_place = found
        else:
            return None
        # the default first, then the mixed precisions (the usual spelling) before the "-true" ones
        values = sorted(((v, default) for v, default in values if lightning_precision_dtype(v)), key=lambda vd: (not vd[1], str(vd[0]).endswith("-true")))
        if not values:
            return None
        s = view.summary(path)
        assert s is not None
        for _, st in [(p, x) for p, x in view.events("ctor") if p == path and x["k"] == "strategy" and x.get("sk") == "deepspeed" and x["f"] == e["f"]]:
            spelled = st.get("cfg")
            if spelled is None:
                continue
            config = view.config(path, st["f"], spelled)
            candidates = [config] if config is not None else []
            if config is None and isinstance(spelled, str) and "." in spelled and view.option_values(path, spelled) is not None:
                candidates = view.shipped_configs()  # a path from the command line: the configs the project ships
            for config in candidates:
                for value, default in values:
                    dtype = lightning_precision_dtype(value)
                    assert dtype is not None
                    other = _OTHER[dtype]
                    if config.enabled(other) is not True or config.enabled(dtype) is True:
                        continue
                    block = other if other == "fp16" or config.get("bf16") is not None else "bfloat16"
                    shown = os.path.basename(config.path) if not config.literal else "the DeepSpeed config"
                    chosen = "" if default else f" (from `--{e['popt'].rsplit('.', 1)[-1]}`)"
                    message = (
                        f"Lightning `{value}`{chosen} conflicts with {other} enabled in {shown}"
                    )
                    help = f"Use a {other} precision with this config, or enable `{dtype}` (and disable `{block}`) in it"
                    related = [(config_place(config, block, "enabled"), f"{other} enabled here")]
                    if option_place is not None:
                        related.append((option_place, "the precision option"))
                    related.append((view.place(path, e), "the Trainer"))
                    data = {"conflict": f"lightning-{dtype}+deepspeed-{other}", "precision": str(value), "default": default,
                            "config": "literal" if config.literal else config.path}
                    return ScaleFinding(view.place(path, st), message, help, related, data,
                                        severity=None if default else Severity.WARNING)
        return None

    def _accelerate_yaml(self, view: ScaleView, config: ScaleConfig, named: Any) -> Optional[ScaleFinding]:
        mp = config.get("mixed_precision")
        file = config.get("deepspeed_config", "deepspeed_config_file")
        if mp not in ("fp16", "bf16") or not isinstance(file, str):
            return None
        ds = view.config_file(file, config.path, None)
        if ds is None or ds.enabled(_OTHER[mp]) is not True:
            return None
        place = config_place(config, "mixed_precision")
        message = f"`mixed_precision: {mp}` here, but its DeepSpeed config enables {_OTHER[mp]}: accelerate raises"
        help = f'Make them agree: set `{_OTHER[mp]}.enabled` to false (or "auto") in {file}'
        related = [(config_place(ds, _OTHER[mp], "enabled"), f"{_OTHER[mp]} enabled here")]
        if named is not None:
            related.append((named, "named here"))
        data = {"conflict": f"accelerate-yaml-{mp}+deepspeed-{_OTHER[mp]}", "config": config.path}
        return ScaleFinding(place, message, help, related, data, config_file=True)


    def _launcher(self, view: ScaleView, launch: Any) -> Iterator[ScaleFinding]:
        """A launch command in conflict with the config it names: `accelerate launch
        --mixed_precision fp16` with a DeepSpeed config (`--deepspeed_config_file`, or the one
        its `--config_file` YAML points to) enabling bf16; the YAML's own `mixed_precision`
        against its DeepSpeed config; a Hugging Face script's `--fp16` / `--bf16` against the
        `--deepspeed ds.json` on the same command line."""
        shown = os.path.basename(launch.script)
        mp = launch.mixed_precision
        option = launch.option("mixed_precision")
        yaml = launch.option("config_file") if launch.kind == "accelerate" else None
        accelerate = view.launcher_config(launch, yaml[0]) if yaml else None
        if accelerate is not None and not _accelerate_shaped(accelerate.values):
            accelerate = None
        if accelerate is not None and option is None:  # the YAML's own precision (`launch.mixed_precision` reads it then)
            named = (launch.path, yaml[1], yaml[2], yaml[1], yaml[2] + len("--config_file"))
            found = self._accelerate_yaml(view, accelerate, named)
            if found is not None:
                yield found
        if mp in ("fp16", "bf16") and option is not None:
            ds_file = launch.option("deepspeed_config_file")
            ds = view.launcher_config(launch, ds_file[0]) if ds_file else None
            via = "--deepspeed_config_file"
            if ds is None and accelerate is not None:
                file = accelerate.get("deepspeed_config", "deepspeed_config_file")
                ds = view.config_file(file, accelerate.path, None) if isinstance(file, str) else None
                via = "its --config_file"
            if ds is not None and ds.enabled(_OTHER[mp]) is True:
                place = (launch.path, option[1], option[2], option[1], option[2] + len("--mixed_precision"))
                message = f"`accelerate launch --mixed_precision {mp}` with a DeepSpeed config enabling {_OTHER[mp]}: accelerate raises"
                help = f'Make them agree: launch with `--mixed_precision {_OTHER[mp]}`, or set `{_OTHER[mp]}.enabled` to false (or "auto") in the DeepSpeed config'
                related = [(config_place(ds, _OTHER[mp], "enabled"), f"{_OTHER[mp]} enabled here")]
                data = {"conflict": f"launcher-{mp}+deepspeed-{_OTHER[mp]}", "config": ds.path, "via": via, "script": shown}
                yield ScaleFinding(place, message, help, related, data, config_file=True)
        found = self._launched_trainer(view, launch)
        if found is not None:
            yield found

    def _launched_trainer(self, view: ScaleView, launch: Any) -> Optional[ScaleFinding]:
        """`--fp16` / `--bf16` against the `--deepspeed ds.json` of the same command line, for a
        script whose `TrainingArguments` come from `HfArgumentParser`: the Trainer compares
        each explicit `enabled` of the DeepSpeed config with its flags (unset flags are False)."""
        ds_arg = launch.arg("deepspeed")
        if ds_arg is None or not ds_arg[0] or not _parses_training_arguments(view, launch.script):
            return None
        flags: Dict[str, Tuple[bool, int, int]] = {}
        for block in ("fp16", "bf16"):
            given = launch.arg(block)
            if given is None:
                continue
            value = command_line_bool(given[0])
            if value is None:
                return None  # `--bf16 $BF16`: decided at run time
            flags[block] = (value, given[1], given[2])
        if not any(v for v, _, _ in flags.values()):
            return None  # the run's precision is not on the command line
        ds = view.launcher_config(launch, ds_arg[0])
        if ds is None:
            return None
        for block in ("fp16", "bf16"):
            enabled = ds.enabled(block)
            hf = flags.get(block, (False, 0, 0))[0]
            if enabled is None or enabled == hf:
                continue
            shown_flag = next(b for b in ("fp16", "bf16") if flags.get(b, (False,))[0])
            _, row, col = flags[shown_flag]
            place = (launch.path, row, col, row, col + len(shown_flag) + 2)
            message = f"`--{shown_flag}` here, but its DeepSpeed config sets `{block}.enabled: {str(enabled).lower()}`: the Trainer raises"
            help = f'Set `{block}.enabled` to "auto" in {os.path.basename(ds.path)}: the Trainer fills it from its flags'
            related = [(config_place(ds, block, "enabled"), f"{block}.enabled set here")]
            data = {"conflict": f"launcher-trainer-{block}", "hf": hf, "deepspeed": enabled, "config": ds.path,
                    "script": os.path.basename(launch.script)}
            return ScaleFinding(place, message, help, related, data, config_file=True)
        return None


def _parses_training_arguments(view: ScaleView, script: str) -> bool:
    """The launched script builds `TrainingArguments` from its command line: it calls
    `HfArgumentParser` (its text; the script's bytes then decide a finding)."""
    text = view.project_text(script)
    return text is not None and "HfArgumentParser" in text and "parse_args" in text


def _plugin_configs(view: ScaleView, path: str, func: str, spelled: Any) -> List[ScaleConfig]:
    """The DeepSpeed configs a `deepspeed_plugin=` argument's `DeepSpeedPlugin(hf_ds_config=...)` holds."""
    found: List[Tuple[str, Dict[str, Any]]] = []
    if isinstance(spelled, dict) and "c" in spelled:
        e = view.event_at(path, spelled["r"], spelled["cc"])
        if e is not None and e["e"] == "ctor" and e["k"] == "dsplugin":
            found = [(path, e)]
    elif isinstance(spelled, str):
        found = view.constructors(path, func, spelled, "dsplugin")
    out = []
    for p, e in found:
        config = view.config(p, e["f"], e.get("cfg"))
        if config is not None:
            out.append(config)
    return out


def _accelerate_shaped(values: Dict[str, Any]) -> bool:
    return isinstance(values, dict) and "distributed_type" in values and "mixed_precision" in values
