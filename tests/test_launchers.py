"""Launcher precision facts (issues 22/23): the launch commands a project ships outside its Python
code (`model/project/launchers.py`) and the findings they decide."""
from __future__ import annotations

from pathlib import Path

from amplint import Config, lint_paths
from amplint.model.project import launchers


def _project(tmp_path, files):
    project = tmp_path / "p"
    project.mkdir(parents=True)
    (project / "pyproject.toml").write_text("[project]\nname='x'\n")
    for name, text in files.items():
        target = project / name
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text)
    return project


def findings(project, codes=None):
    out = []
    for d in lint_paths([str(project)], Config()).diagnostics:
        if codes and d.code not in codes:
            continue
        out.append((Path(d.filename).resolve().relative_to(project.resolve()).as_posix(), d.location.row, d.code))
    return sorted(out)


# ------------------------------------------------------------------ reading launch commands


def test_a_quoted_continued_accelerate_command_is_read_with_its_script(tmp_path):
    project = _project(tmp_path, {
        "pkg/finetune.py": "print()\n",
        "scripts/debug/finetune.sh": (
            '#!/bin/bash\nLAUNCH_CMD="accelerate launch \\\n    --mixed_precision bf16 \\\n    --num_processes 1 \\\n'
            '    pkg/finetune.py \\\n    --learning_rate 5e-06"\n'
        ),
    })
    found = launchers.read_launches(str(project / "scripts/debug/finetune.sh"), str(project))
    assert len(found) == 1
    launch = found[0]
    assert launch.kind == "accelerate" and launch.script == str((project / "pkg/finetune.py").resolve())
    assert launch.mixed_precision == "bf16" and launch.option("mixed_precision")[1:] == (3, 5)
    assert launch.distributed_plugin is False
    assert launch.arg("learning_rate")[0] == "5e-06"


def test_the_equals_spelling_a_module_launcher_and_a_readme_block(tmp_path):
    project = _project(tmp_path, {
        "src/train.py": "print()\n",
        "README.md": "Train:\n\n```bash\n$ accelerate launch --mixed-precision=fp16 src/train.py --config x.yaml\n```\n\n"
                     "accelerate launch --mixed_precision bf16 src/train.py (prose, not a command block)\n",
        "run.sh": "uv run python -m accelerate.commands.launch --mixed_precision bf16 --use_deepspeed src/train.py\n",
    })
    readme = launchers.read_launches(str(project / "README.md"), str(project))
    assert [(l.mixed_precision, l.row) for l in readme] == [("fp16", 4)]
    (run,) = launchers.read_launches(str(project / "run.sh"), str(project))
    assert run.mixed_precision == "bf16" and run.distributed_plugin is True


def test_a_quoted_equals_value_is_the_options_value(tmp_path):
    """`--mixed_precision="fp16"`: the tokenizer drops the quotes and splits there; the value is
    the word written right after the quote (REPA's README: `--mixed-precision="fp16"`)."""
    project = _project(tmp_path, {
        "train.py": "print()\n",
        "README.md": '```bash\naccelerate launch --mixed_precision="fp16" train.py \\\n  --mixed-precision="bf16" --seed=0 --report-to= "x"\n```\n',
    })
    (launch,) = launchers.read_launches(str(project / "README.md"), str(project))
    assert launch.mixed_precision == "fp16" and launch.script == str((project / "train.py").resolve())
    assert launch.arg("mixed_precision")[0] == "bf16"
    assert launch.arg("seed")[0] == "0"
    assert launch.arg("report_to")[0] == "", "a word after a space is no quoted value"


def test_scripts_that_do_not_resolve_to_one_project_file_are_not_launches(tmp_path):
    project = _project(tmp_path, {
        "train.py": "print()\n",
        "sub/train.py": "print()\n",
        "sub/run.sh": (
            "accelerate launch --mixed_precision fp16 $SCRIPT_DIR/train.py\n"  # an expansion
            "accelerate launch --mixed_precision fp16 train.py\n"  # sub/train.py and train.py: ambiguous
            "accelerate launch --mixed_precision fp16 missing.py\n"
            "accelerate launch --mixed_precision fp16 -m pkg.train\n"
            "# accelerate launch --mixed_precision fp16 ../train.py\n"
        ),
    })
    assert launchers.read_launches(str(project / "sub/run.sh"), str(project)) == []


def test_a_config_file_or_no_process_layout_leaves_the_plugins_unknown(tmp_path):
    project = _project(tmp_path, {
        "train.py": "print()\n",
        "run.sh": "accelerate launch --config_file acc.yaml train.py\naccelerate launch --mixed_precision bf16 train.py\n",
    })
    first, second = launchers.read_launches(str(project / "run.sh"), str(project))
    assert first.distributed_plugin is None and second.distributed_plugin is None


# ------------------------------------------------------------------ AMP808 across launchers

HF_SCRIPT = (
    "import torch\noptimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)\n"
    "from transformers import HfArgumentParser, TrainingArguments, Trainer\n"
    "parser = HfArgumentParser((TrainingArguments,))\n"
    "(training_args,) = parser.parse_args_into_dataclasses()\n"
    "Trainer(model=model, args=training_args).train()\n"
)
ACC_SCRIPT = (
    "import torch\nfrom accelerate import Accelerator\naccelerator = Accelerator()\n"
    "optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)\n"
    "model, optimizer = accelerator.prepare(model, optimizer)\n"
)


def test_accelerate_launch_fp16_with_a_bf16_deepspeed_config_is_a_conflict(tmp_path):
    project = _project(tmp_path, {
        "train.py": ACC_SCRIPT,
        "ds.json": '{"train_micro_batch_size_per_gpu": 4, "bf16": {"enabled": true}}',
        "run.sh": "accelerate launch --mixed_precision fp16 --use_deepspeed --deepspeed_config_file ds.json train.py\n",
    })
    assert findings(project, {"AMP808"}) == [("run.sh", 1, "AMP808")]


def test_the_launcher_precision_against_the_deepspeed_config_its_yaml_points_to(tmp_path):
    project = _project(tmp_path, {
        "train.py": ACC_SCRIPT,
        "configs/zero2.json": '{"train_micro_batch_size_per_gpu": 4, "bf16": {"enabled": true}}',
        "configs/acc.yaml": "compute_environment: LOCAL_MACHINE\ndistributed_type: DEEPSPEED\ndeepspeed_config:\n"
                            "  deepspeed_config_file: configs/zero2.json\nmixed_precision: bf16\n",
        "run.sh": "accelerate launch --config_file configs/acc.yaml --mixed_precision fp16 train.py\n"
                  "accelerate launch --config_file configs/acc.yaml train.py\n",
    })
    assert findings(project, {"AMP808"}) == [("run.sh", 1, "AMP808")]


def test_a_launched_yaml_disagreeing_with_its_deepspeed_config(tmp_path):
    project = _project(tmp_path, {
        "train.py": ACC_SCRIPT,
        "zero2.json": '{"train_micro_batch_size_per_gpu": 4, "bf16": {"enabled": true}}',
        "acc.yaml": "distributed_type: DEEPSPEED\ndeepspeed_config:\n  deepspeed_config_file: zero2.json\nmixed_precision: fp16\n",
        "run.sh": "accelerate launch --config_file acc.yaml train.py\n",
    })
    assert findings(project, {"AMP808"}) == [("acc.yaml", 4, "AMP808")]


def test_agreeing_launchers_and_auto_configs_are_silent(tmp_path):
    project = _project(tmp_path, {
        "train.py": ACC_SCRIPT,
        "hf.py": HF_SCRIPT,
        "ds_bf16.json": '{"train_micro_batch_size_per_gpu": 4, "bf16": {"enabled": true}}',
        "ds_auto.json": '{"train_micro_batch_size_per_gpu": "auto", "bf16": {"enabled": "auto"}, "fp16": {"enabled": "auto"}}',
        "run.sh": (
            "accelerate launch --mixed_precision bf16 --deepspeed_config_file ds_bf16.json train.py\n"
            "accelerate launch --mixed_precision fp16 --deepspeed_config_file ds_auto.json train.py\n"
            "deepspeed hf.py --deepspeed ds_bf16.json --bf16\n"
            "deepspeed hf.py --deepspeed ds_auto.json --fp16\n"
            "deepspeed hf.py --deepspeed ds_bf16.json --fp16 $FP16\n"
        ),
    })
    assert findings(project, {"AMP808"}) == []


def test_trainer_flags_against_the_deepspeed_config_on_the_same_command_line(tmp_path):
    project = _project(tmp_path, {
        "hf.py": HF_SCRIPT,
        "plain.py": "import argparse\nimport transformers\nparser = argparse.ArgumentParser()\n",
        "ds_fp16.json": '{"train_micro_batch_size_per_gpu": 4, "fp16": {"enabled": true}}',
        "run.sh": (
            "deepspeed --num_gpus 8 hf.py --deepspeed ds_fp16.json --bf16 --output_dir out\n"
            "deepspeed plain.py --deepspeed ds_fp16.json --bf16\n"  # not the Trainer's flags
        ),
    })
    assert findings(project, {"AMP808"}) == [("run.sh", 1, "AMP808")]


# ------------------------------------------------------------------ AMP206 through accelerate's prepare

BF16_SCRIPT = (
    "import torch\n"
    "from accelerate import Accelerator\n"
    "from transformers import AutoModelForCausalLM\n"
    "def param_groups(model, wd):\n"
    "    return [{'params': [p for n, p in model.named_parameters()], 'weight_decay': wd}]\n"
    "def main(args):\n"
    "    accelerator = Accelerator()\n"
    "    model = AutoModelForCausalLM.from_pretrained(args.name, dtype=torch.bfloat16)\n"
    "    groups = param_groups(model, 0.0)\n"
    "    optimizer = torch.optim.AdamW(groups, lr=5e-6)\n"
    "    model, optimizer = accelerator.prepare(model, optimizer)\n"
    "    for batch in loader:\n"
    "        accelerator.backward(model(**batch).loss)\n"
    "        optimizer.step()\n"
)


def test_a_bf16_model_prepared_by_accelerate_launched_without_deepspeed_or_fsdp(tmp_path):
    project = _project(tmp_path, {
        "pkg/finetune.py": BF16_SCRIPT,
        "scripts/debug.sh": "accelerate launch --mixed_precision bf16 --num_processes 1 pkg/finetune.py --lr 5e-6\n",
    })
    assert findings(project, {"AMP206"}) == [("pkg/finetune.py", 10, "AMP206")]


def test_a_conditional_deepspeed_plugin_leaves_the_run_without_it(tmp_path):
    script = BF16_SCRIPT.replace(
        "    accelerator = Accelerator()\n",
        "    plugin = None\n    if args.zero_stage is not None:\n        plugin = DeepSpeedPlugin(hf_ds_config=cfg)\n"
        "    accelerator = Accelerator(deepspeed_plugin=plugin)\n",
    ).replace("from accelerate import Accelerator", "from accelerate import Accelerator\nfrom accelerate.utils import DeepSpeedPlugin")
    project = _project(tmp_path, {
        "dpo.py": script,
        "run.sh": "accelerate launch --mixed_precision bf16 --num_processes 1 dpo.py\n",
    })
    assert [f[2] for f in findings(project, {"AMP206"})] == ["AMP206"]


def test_launches_that_may_put_deepspeed_or_fsdp_behind_prepare_stay_silent(tmp_path):
    """The twins: a launcher with DeepSpeed, FSDP or a config file (which may add either), no
    process layout (accelerate's default config may), a plugin always built in code, a launcher
    of another script, fp32 weights, and a file that freezes parameters."""
    cases = {
        "ds": ("accelerate launch --mixed_precision bf16 --use_deepspeed --num_processes 8 t.py\n", BF16_SCRIPT),
        "fsdp": ("accelerate launch --mixed_precision bf16 --use_fsdp --num_processes 8 t.py\n", BF16_SCRIPT),
        "yaml": ("accelerate launch --config_file acc.yaml --num_processes 8 t.py\n", BF16_SCRIPT),
        "default": ("accelerate launch --mixed_precision bf16 t.py\n", BF16_SCRIPT),
        "plugin": ("accelerate launch --mixed_precision bf16 --num_processes 1 t.py\n",
                   BF16_SCRIPT.replace("Accelerator()", "Accelerator(deepspeed_plugin=DeepSpeedPlugin(zero_stage=2))")),
        "other": ("accelerate launch --mixed_precision bf16 --num_processes 1 other.py\n", BF16_SCRIPT),
        "fp32": ("accelerate launch --mixed_precision bf16 --num_processes 1 t.py\n", BF16_SCRIPT.replace(", dtype=torch.bfloat16", "")),
        "frozen": ("accelerate launch --mixed_precision bf16 --num_processes 1 t.py\n",
                   BF16_SCRIPT.replace("    groups =", "    model.lm_head.requires_grad_(False)\n    groups =")),
    }
    for name, (launcher, script) in cases.items():
        project = _project(tmp_path / name, {"t.py": script, "other.py": "print()\n", "run.sh": launcher})
        assert findings(project, {"AMP206"}) == [], name


# ------------------------------------------------------------------ AMP402: the precision accelerate's launcher sets

TRAINER = (
    "import torch\n"
    "from accelerate import Accelerator\n"
    "class Trainer:\n"
    "    def __init__(self, model, lr, accelerate_kwargs: dict = dict()):\n"
    "        self.accelerator = Accelerator(gradient_accumulation_steps=1, **accelerate_kwargs)\n"
    "        self.optimizer = torch.optim.AdamW(model.parameters(), lr=lr)\n"
    "        self.model, self.optimizer = self.accelerator.prepare(model, self.optimizer)\n"
    "    def save_checkpoint(self, step):\n"
    "        ckpt = dict(model=self.accelerator.unwrap_model(self.model).state_dict(), optimizer=self.optimizer.state_dict(), step=step)\n"
    "        self.accelerator.save(ckpt, f'ckpt/model_{step}.pt')\n"
    "    def load_checkpoint(self):\n"
    "        ckpt = torch.load('ckpt/model_last.pt', map_location='cpu')\n"
    "        self.optimizer.load_state_dict(ckpt['optimizer'])\n"
    "        return ckpt['step']\n"
    "    def train(self, loader):\n"
    "        step = self.load_checkpoint()\n"
    "        for x in loader:\n"
    "            self.accelerator.backward(self.model(x).mean())\n"
    "            self.optimizer.step()\n"
    "            step += 1\n"
    "            self.save_checkpoint(step)\n"
)
OPTIM = (
    "class MultiOptimizer:\n"
    "    def __init__(self, optimizers):\n"
    "        self.optimizers = optimizers\n"
    "    def state_dict(self):\n"
    "        return {k: o.state_dict() for k, o in self.optimizers.items()}\n"
    "    def load_state_dict(self, state):\n"
    "        for k, o in self.optimizers.items():\n"
    "            o.load_state_dict(state[k])\n"
    "    def step(self, key=None):\n"
    "        for o in self.optimizers.values():\n"
    "            o.step()\n"
)
SCRIPT = "import torch\nfrom pkg.trainer import Trainer\nTrainer(torch.nn.Linear(4, 4), 1e-4).train([])\n"


def test_a_resume_checkpoint_of_an_accelerator_the_launcher_makes_fp16(tmp_path):
    """`accelerate launch --mixed_precision=fp16 train.py` hands fp16 to every Accelerator of the
    process: the trainer module the script imports builds one without `mixed_precision` (an
    empty `**accelerate_kwargs` nothing passes) and checkpoints the optimizer by hand."""
    project = _project(tmp_path, {
        "pkg/__init__.py": "", "pkg/trainer.py": TRAINER, "train.py": SCRIPT,
        "README.md": "```bash\naccelerate launch train.py\naccelerate launch --mixed_precision=fp16 train.py\n```\n",
    })
    assert findings(project, {"AMP402"}) == [("pkg/trainer.py", 10, "AMP402")]
    # a launch in bf16 beside it: fp16 is one of the documented runs (an info naming the choice)
    (project / "run.sh").write_text("accelerate launch --mixed_precision bf16 train.py\n")
    (found,) = [d for d in lint_paths([str(project)], Config()).diagnostics if d.code == "AMP402"]
    assert found.severity.value == "info" and found.message.startswith("when launched with --mixed_precision fp16: ")


def test_launches_that_leave_the_accelerator_without_a_grad_scaler_stay_silent(tmp_path):
    """The twins: bf16 or no precision on the command line (the user's own accelerate config),
    DeepSpeed or a config file behind the launcher, a launch of a script that does not import the
    trainer, a caller passing the kwargs (which may hold `mixed_precision`), a literal bf16
    Accelerator, and a trainer that saves accelerate's scaler."""
    fp16 = "accelerate launch --mixed_precision fp16 train.py\n"
    cases = {
        "bf16": ("accelerate launch --mixed_precision bf16 train.py\n", TRAINER, SCRIPT),
        "unstated": ("accelerate launch --num_processes 8 train.py\n", TRAINER, SCRIPT),
        "deepspeed": ("accelerate launch --mixed_precision fp16 --use_deepspeed train.py\n", TRAINER, SCRIPT),
        "yaml": ("accelerate launch --config_file acc.yaml --mixed_precision fp16 train.py\n", TRAINER, SCRIPT),
        "other": ("accelerate launch --mixed_precision fp16 eval.py\n", TRAINER, SCRIPT),
        "passed": (fp16, TRAINER, SCRIPT.replace("1e-4)", "1e-4, accelerate_kwargs=kw)")),
        "positional": (fp16, TRAINER, SCRIPT.replace("1e-4)", "1e-4, kw)")),
        "literal": (fp16, TRAINER.replace("**accelerate_kwargs", "mixed_precision='bf16'"), SCRIPT),
        "saved": (fp16, TRAINER.replace("step=step)", "step=step, scaler=self.accelerator.scaler.state_dict())"), SCRIPT),
        # `prepare` returns a container of optimizers unwrapped: the scaler is never stepped (AMP102's bug)
        "container": (fp16, "from pkg.optim import MultiOptimizer\n" + TRAINER.replace(
            "torch.optim.AdamW(model.parameters(), lr=lr)", "MultiOptimizer({'g': torch.optim.AdamW(model.parameters(), lr=lr)})"), SCRIPT),
    }
    for name, (launcher, trainer, script) in cases.items():
        project = _project(tmp_path / name, {
            "pkg/__init__.py": "", "pkg/trainer.py": trainer, "train.py": script,
            "eval.py": "print('eval')\n", "run.sh": launcher, "pkg/optim.py": OPTIM,
        })
        assert findings(project, {"AMP402"}) == [], name


# ------------------------------------------------------------------ `--config_file cfg.yaml`: the launched YAML's precision

DDP_FP16_YAML = (
    "compute_environment: LOCAL_MACHINE\ndistributed_type: MULTI_GPU\ndowncast_bf16: 'no'\ngpu_ids: all\n"
    "machine_rank: 0\nmain_training_function: main\nmixed_precision: fp16\nnum_machines: 1\nnum_processes: 4\n"
    "use_cpu: false\n"
)


def test_a_launched_yaml_gives_the_launch_its_precision_and_plugins(tmp_path):
    from amplint.model.project.configs import parse_yaml

    def facts(text):
        parsed = parse_yaml(text)
        return launchers.launch_config("acc.yaml", parsed.values, parsed.lines)

    ddp = facts(DDP_FP16_YAML)
    assert (ddp.mixed_precision, ddp.plugins, ddp.cpu, ddp.row("mixed_precision")) == ("fp16", frozenset(), False, 7)
    assert facts("distributed_type: DEEPSPEED\ndeepspeed_config:\n  zero_stage: 2\nmixed_precision: fp16\n").plugins == {"deepspeed"}
    assert facts("distributed_type: FSDP\nmixed_precision: bf16\n").plugins == {"fsdp"}
    assert facts("compute_environment: LOCAL_MACHINE\ndistributed_type: 'NO'\nmixed_precision: 'no'\n").mixed_precision == "no"
    assert facts("compute_environment: LOCAL_MACHINE\ndistributed_type: NO\nmixed_precision: no\n").plugins == frozenset()
    assert facts("compute_environment: LOCAL_MACHINE\ndistributed_type: MULTI_GPU\n").mixed_precision == "no"  # accelerate's default
    assert facts("compute_environment: LOCAL_MACHINE\ndistributed_type: MULTI_GPU\nfp16: true\n").mixed_precision == "fp16"
    assert facts("distributed_type: $KIND\nmixed_precision: fp16\n").plugins is None
    assert facts("mixed_precision: fp16\nbatch_size: 4\n") is None  # not accelerate's config

    project = _project(tmp_path, {"train.py": "print()\n", "configs/fp16.yaml": DDP_FP16_YAML, "run.sh": (
        "accelerate launch --config_file configs/fp16.yaml train.py\n"
        "accelerate launch --config_file configs/fp16.yaml --mixed_precision bf16 train.py\n"
        "accelerate launch --config_file configs/fp16.yaml --use_deepspeed train.py\n"
        "accelerate launch --config_file ~/.cache/huggingface/accelerate/default_config.yaml train.py\n"
    )})
    from amplint.model.project.wrappers import ScaleView

    class _P:  # the project a ScaleView reads launchers through (no Python file needed)
        root = str(project)
        config_candidates = [str(project / "run.sh")]
        summaries: dict = {}

    view = ScaleView(_P(), lambda path: None, read_configs=True)
    yaml, cli, deepspeed, home = view.launches()
    assert (yaml.mixed_precision, yaml.precision_from_config, yaml.distributed_plugin) == ("fp16", True, False)
    assert (cli.mixed_precision, cli.precision_from_config, cli.distributed_plugin) == ("bf16", False, False)
    assert deepspeed.distributed_plugin is True
    assert (home.mixed_precision, home.distributed_plugin) == (None, None)  # the user's own config: unknown
    assert str((project / "configs/fp16.yaml").resolve()) in view.configs_read


def test_a_resume_checkpoint_of_an_accelerator_its_launched_yaml_makes_fp16(tmp_path):
    project = _project(tmp_path, {
        "pkg/__init__.py": "", "pkg/trainer.py": TRAINER, "train.py": SCRIPT,
        "configs/fp16.yaml": DDP_FP16_YAML,
        "Makefile": "train:\n\taccelerate launch --config_file configs/fp16.yaml train.py\n",
    })
    assert findings(project, {"AMP402"}) == [("pkg/trainer.py", 10, "AMP402")]
    (found,) = [d for d in lint_paths([str(project)], Config()).diagnostics if d.code == "AMP402"]
    assert any(Path(r.filename).name == "fp16.yaml" and r.location.row == 7 for r in found.related)


def test_launched_yamls_that_leave_the_accelerator_without_a_grad_scaler_stay_silent(tmp_path):
    """The twins: the YAML in bf16 or "no", DeepSpeed or Megatron-LM behind it, the command line
    overriding its precision, a YAML on CPU, one whose distributed_type is not literal, and a
    `--config_file` naming no project file (accelerate's default config, outside the project)."""
    cases = {
        "bf16": DDP_FP16_YAML.replace("mixed_precision: fp16", "mixed_precision: bf16"),
        "no": DDP_FP16_YAML.replace("mixed_precision: fp16", "mixed_precision: 'no'"),
        "deepspeed": DDP_FP16_YAML.replace("MULTI_GPU", "DEEPSPEED") + "deepspeed_config:\n  zero_stage: 2\n",
        "megatron": DDP_FP16_YAML.replace("MULTI_GPU", "MEGATRON_LM"),
        "cpu": DDP_FP16_YAML.replace("use_cpu: false", "use_cpu: true"),
        "unknown": DDP_FP16_YAML.replace("MULTI_GPU", "${KIND}"),
    }
    for name, yaml in cases.items():
        project = _project(tmp_path / name, {
            "pkg/__init__.py": "", "pkg/trainer.py": TRAINER, "train.py": SCRIPT, "acc.yaml": yaml,
            "run.sh": "accelerate launch --config_file acc.yaml train.py\n",
        })
        assert findings(project, {"AMP402"}) == [], name
    for name, launcher in {
        "override": "accelerate launch --config_file acc.yaml --mixed_precision bf16 train.py\n",
        "home": "accelerate launch --config_file ~/.cache/huggingface/accelerate/default_config.yaml train.py\n",
        "missing": "accelerate launch --config_file configs/missing.yaml train.py\n",
    }.items():
        project = _project(tmp_path / name, {
            "pkg/__init__.py": "", "pkg/trainer.py": TRAINER, "train.py": SCRIPT, "acc.yaml": DDP_FP16_YAML, "run.sh": launcher,
        })
        assert findings(project, {"AMP402"}) == [], name


def test_a_bf16_model_prepared_under_a_launched_ddp_yaml_and_its_twins(tmp_path):
    bf16 = DDP_FP16_YAML.replace("mixed_precision: fp16", "mixed_precision: bf16")
    cases = {
        "ddp": (bf16, ["AMP206"]),
        "fsdp": (bf16.replace("MULTI_GPU", "FSDP") + "fsdp_config:\n  fsdp_sharding_strategy: FULL_SHARD\n", []),
        "deepspeed": (bf16.replace("MULTI_GPU", "DEEPSPEED") + "deepspeed_config:\n  zero_stage: 3\n", []),
    }
    for name, (yaml, expected) in cases.items():
        project = _project(tmp_path / name, {
            "pkg/finetune.py": BF16_SCRIPT, "configs/acc.yaml": yaml,
            "scripts/train.sh": "accelerate launch --config_file configs/acc.yaml pkg/finetune.py --lr 5e-6\n",
        })
        assert [f[2] for f in findings(project, {"AMP206"})] == expected, name


def test_a_launched_yaml_in_fp16_against_the_deepspeed_config_it_names_in_bf16(tmp_path):
    """The YAML's own `mixed_precision` (no `--mixed_precision` on the command line) is read
    against its DeepSpeed JSON once, in the YAML: the launch's precision now comes from it too."""
    project = _project(tmp_path, {
        "train.py": ACC_SCRIPT,
        "zero2.json": '{"train_micro_batch_size_per_gpu": 4, "bf16": {"enabled": true}}',
        "acc.yaml": "distributed_type: DEEPSPEED\ndeepspeed_config:\n  deepspeed_config_file: zero2.json\nmixed_precision: fp16\n",
        "run.sh": "accelerate launch --config_file acc.yaml train.py\n",
    })
    assert findings(project, {"AMP808"}) == [("acc.yaml", 4, "AMP808")]


# ------------------------------------------------------------------ AMP102: a container `prepare` leaves unwrapped, launched fp16

CONTAINER_SCRIPT = (
    "from accelerate import Accelerator\n"
    "from pkg.optim import MultiOptimizer\n"
    "import torch\n"
    "accelerator = Accelerator()\n"
    "def main(model, loader):\n"
    "    optimizer = MultiOptimizer({'g': torch.optim.AdamW(model.parameters(), lr=1e-4)})\n"
    "    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)\n"
    "    for x in loader:\n"
    "        accelerator.backward(model(x).mean())\n"
    "        optimizer.step('g')\n"
)


def test_a_container_of_optimizers_stepped_after_a_launched_fp16_backward(tmp_path):
    for name, launcher in {
        "flag": "accelerate launch --mixed_precision=fp16 --num_processes=1 train.py\n",
        "yaml": "accelerate launch --config_file acc.yaml train.py\n",
    }.items():
        project = _project(tmp_path / name, {
            "pkg/__init__.py": "", "pkg/optim.py": OPTIM, "train.py": CONTAINER_SCRIPT, "acc.yaml": DDP_FP16_YAML, "run.sh": launcher,
        })
        assert findings(project, {"AMP102"}) == [("train.py", 10, "AMP102")], name
    # fp16 one of the documented runs: a warning naming the run
    (project / "README.md").write_text("```bash\naccelerate launch --config_file acc.yaml --mixed_precision bf16 train.py\n```\n")
    (found,) = [d for d in lint_paths([str(project)], Config()).diagnostics if d.code == "AMP102"]
    assert found.severity.value == "warning" and found.message.startswith("when launched with `mixed_precision: fp16`: ")


def test_launched_containers_that_see_no_scaled_gradients_stay_silent(tmp_path):
    """The twins: bf16 or no precision on the command line, DeepSpeed behind the launcher, a
    launch of another script, an Accelerator stating its own precision in code (the per-file
    check's), and the container's torch optimizers prepared one by one."""
    fp16 = "accelerate launch --mixed_precision fp16 --num_processes 1 train.py\n"
    cases = {
        "bf16": ("accelerate launch --mixed_precision bf16 --num_processes 1 train.py\n", CONTAINER_SCRIPT),
        "unstated": ("accelerate launch --num_processes 1 train.py\n", CONTAINER_SCRIPT),
        "deepspeed": ("accelerate launch --mixed_precision fp16 --use_deepspeed train.py\n", CONTAINER_SCRIPT),
        "other": ("accelerate launch --mixed_precision fp16 eval.py\n", CONTAINER_SCRIPT),
        "code": (fp16, CONTAINER_SCRIPT.replace("Accelerator()", "Accelerator(mixed_precision='bf16')")),
        "inner": (fp16, CONTAINER_SCRIPT.replace(
            "    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)\n",
            "    for k in optimizer.optimizers:\n        optimizer.optimizers[k] = accelerator.prepare(optimizer.optimizers[k])\n"
            "    model, loader = accelerator.prepare(model, loader)\n")),
    }
    for name, (launcher, script) in cases.items():
        project = _project(tmp_path / name, {
            "pkg/__init__.py": "", "pkg/optim.py": OPTIM, "train.py": script, "eval.py": "print()\n", "run.sh": launcher,
        })
        assert findings(project, {"AMP102"}) == [], name


# ------------------------------------------------------------------ AMP803: accelerate's FSDP plugin, launched in fp16

FSDP_FP16_YAML = DDP_FP16_YAML.replace("MULTI_GPU", "FSDP") + "fsdp_config:\n  fsdp_sharding_strategy: FULL_SHARD\n"


def test_a_launch_putting_fsdp_behind_accelerate_in_fp16_reduces_in_fp16(tmp_path):
    for name, (launcher, expected) in {
        "yaml": ("accelerate launch --config_file acc.yaml train.py\n", ("acc.yaml", 7, "AMP803")),
        "flags": ("accelerate launch --use_fsdp --mixed_precision fp16 --num_processes 8 train.py\n", ("run.sh", 1, "AMP803")),
        "yaml+flag": ("accelerate launch --config_file ddp.yaml --use_fsdp train.py\n", ("ddp.yaml", 7, "AMP803")),
    }.items():
        project = _project(tmp_path / name, {"train.py": ACC_SCRIPT, "acc.yaml": FSDP_FP16_YAML, "ddp.yaml": DDP_FP16_YAML, "run.sh": launcher})
        assert findings(project, {"AMP803"}) == [expected], name


def test_launched_fsdp_runs_that_do_not_reduce_in_fp16_stay_silent(tmp_path):
    """The twins: bf16, DDP or DeepSpeed behind the launcher, the command line overriding the
    YAML's precision, a YAML on CPU, an Accelerator with its own FSDP plugin (its own policy), its
    own precision, or `**kwargs`, and a launch of another script."""
    plugin = ACC_SCRIPT.replace("Accelerator()", "Accelerator(fsdp_plugin=FullyShardedDataParallelPlugin(mixed_precision_policy=policy))")
    cases = {
        "bf16": ("accelerate launch --config_file acc.yaml train.py\n", FSDP_FP16_YAML.replace("fp16", "bf16"), ACC_SCRIPT),
        "ddp": ("accelerate launch --config_file acc.yaml train.py\n", DDP_FP16_YAML, ACC_SCRIPT),
        "deepspeed": ("accelerate launch --config_file acc.yaml --use_deepspeed train.py\n", FSDP_FP16_YAML, ACC_SCRIPT),
        "override": ("accelerate launch --config_file acc.yaml --mixed_precision bf16 train.py\n", FSDP_FP16_YAML, ACC_SCRIPT),
        "cpu": ("accelerate launch --config_file acc.yaml train.py\n", FSDP_FP16_YAML.replace("use_cpu: false", "use_cpu: true"), ACC_SCRIPT),
        "plugin": ("accelerate launch --config_file acc.yaml train.py\n", FSDP_FP16_YAML, plugin),
        "code bf16": ("accelerate launch --config_file acc.yaml train.py\n", FSDP_FP16_YAML,
                      ACC_SCRIPT.replace("Accelerator()", "Accelerator(mixed_precision='bf16')")),
        "kwargs": ("accelerate launch --config_file acc.yaml train.py\n", FSDP_FP16_YAML, ACC_SCRIPT.replace("Accelerator()", "Accelerator(**kw)")),
        "other": ("accelerate launch --config_file acc.yaml eval.py\n", FSDP_FP16_YAML, ACC_SCRIPT),
        "home": ("accelerate launch --config_file $HOME/fsdp.yaml train.py\n", FSDP_FP16_YAML, ACC_SCRIPT),
    }
    for name, (launcher, yaml, script) in cases.items():
        project = _project(tmp_path / name, {"train.py": script, "eval.py": "print()\n", "acc.yaml": yaml, "run.sh": launcher})
        assert findings(project, {"AMP803"}) == [], name


def test_a_shipped_accelerate_yaml_no_code_names_against_its_deepspeed_config(tmp_path):
    """issue 23: an accelerate config YAML the project ships, named by no code and no launcher,
    whose `mixed_precision` disagrees with the DeepSpeed JSON it points to; one that agrees, and
    one stating no precision, are silent (no conflict of precisions)."""
    project = _project(tmp_path, {
        "train.py": ACC_SCRIPT,
        "configs/ds_fp16.json": '{"train_micro_batch_size_per_gpu": "auto", "fp16": {"enabled": true}}',
        "configs/ds_bf16.json": '{"train_micro_batch_size_per_gpu": "auto", "bf16": {"enabled": true}}',
        "configs/zero2.yaml": "compute_environment: LOCAL_MACHINE\ndistributed_type: DEEPSPEED\ndeepspeed_config:\n"
                              "  deepspeed_config_file: configs/ds_fp16.json\nmixed_precision: bf16\n",
        "configs/zero2_bf16.yaml": "distributed_type: DEEPSPEED\ndeepspeed_config:\n"
                                   "  deepspeed_config_file: configs/ds_bf16.json\nmixed_precision: bf16\n",
        "configs/zero2_plain.yaml": "distributed_type: DEEPSPEED\ndeepspeed_config:\n  deepspeed_config_file: configs/ds_fp16.json\n",
        "configs/model.yaml": "mixed_precision: fp16\nlr: 0.001\n",
    })
    assert findings(project, {"AMP808"}) == [("configs/zero2.yaml", 5, "AMP808")]


def test_a_shipped_accelerate_yaml_in_a_project_without_accelerate_is_not_read(tmp_path):
    project = _project(tmp_path, {
        "train.py": "import torch\nmodel = torch.nn.Linear(2, 2)\nloss = model(torch.randn(1, 2)).sum()\nloss.backward()\n",
        "configs/ds_fp16.json": '{"train_micro_batch_size_per_gpu": "auto", "fp16": {"enabled": true}}',
        "configs/zero2.yaml": "distributed_type: DEEPSPEED\ndeepspeed_config:\n"
                              "  deepspeed_config_file: configs/ds_fp16.json\nmixed_precision: bf16\n",
    })
    assert findings(project, {"AMP808"}) == []


# ------------------------------------------------------------------ AMP402: a holder class checkpointing attribute by attribute

HOLDER = (
    "import os\nimport torch\n"
    "class TrainState(object):\n"
    "    def __init__(self, optimizer, step, nnet=None):\n"
    "        self.optimizer = optimizer\n        self.step = step\n        self.nnet = nnet\n"
    "    def save(self, path):\n"
    "        for key, val in self.__dict__.items():\n"
    "            if key != 'step':\n"
    "                torch.save(val.state_dict(), os.path.join(path, f'{key}.pth'))\n"
    "    def load(self, path):\n"
    "        for key, val in self.__dict__.items():\n"
    "            if key != 'step':\n"
    "                val.load_state_dict(torch.load(os.path.join(path, f'{key}.pth')))\n"
    "    def resume(self, root):\n"
    "        self.load(root)\n"
)
HOLDER_SCRIPT = (
    "import torch\nimport accelerate\nfrom utils import TrainState\n"
    "def train(loader):\n"
    "    accelerator = accelerate.Accelerator()\n"
    "    nnet = torch.nn.Linear(4, 4)\n"
    "    state = TrainState(torch.optim.AdamW(nnet.parameters()), 0, nnet)\n"
    "    nnet, optimizer = accelerator.prepare(state.nnet, state.optimizer)\n"
    "    state.resume('ckpt')\n"
    "    for x in loader:\n"
    "        accelerator.backward(nnet(x).mean())\n"
    "        optimizer.step()\n"
    "        state.save('ckpt')\n"
)


def test_a_holder_class_saving_each_attribute_misses_the_scaler_of_a_launched_fp16_accelerator(tmp_path):
    """U-ViT's `TrainState.save`: a loop over `self.__dict__` saves every attribute's state, the
    optimizer among them, for a bare Accelerator that the README launches in fp16: one finding at
    the holder's save. Twins: a bf16 launch, and a holder that also keeps a scaler."""
    fp16 = "```bash\naccelerate launch --mixed_precision fp16 train.py\n```\n"
    project = _project(tmp_path / "fp16", {"utils.py": HOLDER, "train.py": HOLDER_SCRIPT, "README.md": fp16})
    assert findings(project, {"AMP402"}) == [("utils.py", 11, "AMP402")]
    bf16 = _project(tmp_path / "bf16", {"utils.py": HOLDER, "train.py": HOLDER_SCRIPT, "README.md": fp16.replace("fp16", "bf16")})
    assert findings(bf16, {"AMP402"}) == []
    kept = HOLDER.replace("self.nnet = nnet\n", "self.nnet = nnet\n        self.scaler = scaler\n").replace("nnet=None)", "nnet=None, scaler=None)")
    held = _project(tmp_path / "held", {"utils.py": kept, "train.py": HOLDER_SCRIPT, "README.md": fp16})
    assert findings(held, {"AMP402"}) == []


# ------------------------------------------------------------------ AMP206: torchrun / python launches, a notebook's command blocks

TUTORIAL_UTILS = (
    "import torch\n"
    "from torch.optim import AdamW\n"
    "from accelerate import Accelerator\n"
    "class Net(torch.nn.Module):\n"
    "    pass\n"
    "def init_model(hp):\n"
    "    model = Net(hp).to(device='cuda', dtype=torch.bfloat16)\n"
    "    return model\n"
    "def build_adamw(model, hp):\n"
    "    params = [p for p in model.parameters() if p.requires_grad]\n"
    "    return AdamW(params=params, lr=hp.lr)\n"
    "def wrap(model, hp):\n"
    "    accelerator = Accelerator(mixed_precision='bf16')\n"
    "    optimizer = build_adamw(model, hp)\n"
    "    model, optimizer = accelerator.prepare(model, optimizer)\n"
    "    return accelerator, model, optimizer\n"
    "def run(hp, loader):\n"
    "    model = init_model(hp)\n"
    "    accelerator, model, optimizer = wrap(model, hp)\n"
    "    for batch in loader:\n"
    "        accelerator.backward(model(batch).loss)\n"
    "        optimizer.step()\n"
)
TUTORIAL_SCRIPT = "from utils import run\nrun(hp, loader)\n"


def _notebook(*cells):
    import json

    return json.dumps({"cells": [{"cell_type": kind, "metadata": {}, "source": text.splitlines(True)} for kind, text in cells],
                       "metadata": {}, "nbformat": 4, "nbformat_minor": 5}, indent=1)


def test_a_notebooks_command_blocks_are_launches(tmp_path):
    project = _project(tmp_path, {
        "t.ipynb": _notebook(
            ("markdown", "Run it on 8 GPUs:\n\n```bash\ntorchrun --standalone --nproc_per_node=8 run.py --steps 30\n```\n"),
            ("code", "import os\n!python3 run.py --steps 1\nprint('done')\n"),
            ("code", "%%bash\naccelerate launch --use_deepspeed run.py\n"),
        ),
        "run.py": "print()\n",
    })
    found = launchers.read_launches(str(project / "t.ipynb"), str(project))
    assert [(l.kind, l.script.endswith("run.py")) for l in found] == [("torchrun", True), ("python", True), ("accelerate", True)]
    text = (project / "t.ipynb").read_text().split("\n")
    assert "torchrun" in text[found[0].row - 1] and "!python3" in text[found[1].row - 1]
    assert found[2].distributed_plugin is True


def test_a_bf16_model_prepared_in_a_module_a_torchrun_launched_script_imports(tmp_path):
    """TransformerEngine's te_mixtral tutorial: the notebook's command block runs `torchrun ...
    run.py`, which imports the module whose helper builds AdamW on a bf16 model and whose caller
    hands it to `prepare`: with no accelerate launcher no DeepSpeed or FSDP is behind it."""
    project = _project(tmp_path, {
        "utils.py": TUTORIAL_UTILS, "run.py": TUTORIAL_SCRIPT,
        "tutorial.ipynb": _notebook(("markdown", "```bash\ntorchrun --standalone --nproc_per_node=8 run.py\n```\n")),
    })
    assert findings(project, {"AMP206"}) == [("utils.py", 11, "AMP206")]
    (project / "tutorial.ipynb").unlink()
    (project / "run.sh").write_text("torchrun --standalone run.py\n")
    assert findings(project, {"AMP206"}) == [("utils.py", 11, "AMP206")]


def test_imported_modules_whose_launches_may_hold_deepspeed_or_fsdp_stay_silent(tmp_path):
    """The twins: a second script importing the module launched by `accelerate launch` with no
    layout (accelerate's default config may add DeepSpeed or FSDP), a `deepspeed` launcher, no
    launch at all, a freeze in the module, and fp32 weights."""
    plain = "torchrun --nproc_per_node=8 run.py\n"
    cases = {
        "default": (plain + "accelerate launch run2.py\n", TUTORIAL_UTILS),
        "deepspeed": ("deepspeed run.py --deepspeed ds.json\n", TUTORIAL_UTILS),
        "none": ("echo accelerate\n", TUTORIAL_UTILS),
        "frozen": (plain, TUTORIAL_UTILS.replace("    return model\n", "    model.embed.requires_grad_(False)\n    return model\n", 1)),
        "fp32": (plain, TUTORIAL_UTILS.replace(", dtype=torch.bfloat16", "")),
    }
    for name, (launcher, utils) in cases.items():
        project = _project(tmp_path / name, {"utils.py": utils, "run.py": TUTORIAL_SCRIPT, "run2.py": TUTORIAL_SCRIPT, "run.sh": launcher})
        assert findings(project, {"AMP206"}) == [], name
