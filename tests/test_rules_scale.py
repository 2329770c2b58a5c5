"""Issue 23's linter half: the wrapper kind fact, the config readers, and what the engine does
with findings that depend on config files (AMP801-AMP808)."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from amplint import Config, lint_paths
from amplint.engine.cache import Cache
from amplint.model.project import configs
from amplint.model.project.wrappers import file_view

ROOT = Path(__file__).resolve().parents[1]
PROJECTS = ROOT / "fixtures" / "projects"


def findings(paths, cache=None):
    return sorted(
        (Path(d.filename).resolve().relative_to(Path(paths[0]).resolve() if Path(paths[0]).is_dir() else Path(paths[0]).resolve().parent).as_posix(), d.location.row, d.code)
        for d in lint_paths([str(p) for p in paths], Config(), cache=cache).diagnostics
    )


# ------------------------------------------------------------------ the wrapper kind fact


WRAPPERS = """
import torch
import deepspeed
import lightning as L
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP, fully_shard, MixedPrecision
from torch.nn.parallel import DistributedDataParallel as DDP

plain = Net()
ddp = DDP(Net(), device_ids=[0])
fsdp1 = FSDP(Net(), mixed_precision=MixedPrecision(param_dtype=torch.bfloat16))
fsdp2 = Net()
fully_shard(fsdp2)
engine, ds_optimizer, _, _ = deepspeed.initialize(model=Net(), config={"train_batch_size": 8, "bf16": {"enabled": True}})
fabric = L.Fabric(strategy="fsdp", precision="bf16-mixed")
fabric_model = fabric.setup_module(Net())
"""


@pytest.mark.parametrize(
    "name, kind",
    [("plain", None), ("ddp", "ddp"), ("fsdp1", "fsdp1"), ("fsdp2", "fsdp2"), ("engine", "deepspeed"), ("fabric_model", "fabric")],
)
def test_each_wrapper_kind_is_told_apart(name, kind):
    view = file_view(WRAPPERS, "w.py")
    found = view.wrappers("w.py", "<module>", name)
    assert [w.kind for w in found] == ([kind] if kind else [])


COMPILED = """
import torch
import deepspeed
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP, fully_shard
from torch.nn.parallel import DistributedDataParallel as DDP

inline = torch.compile(FSDP(Net()), mode="max-autotune")
rebound = FSDP(Net())
rebound = torch.compile(rebound)
sharded = FSDP(Net())
compiled = torch.compile(sharded)
original = compiled._orig_mod
ddp = torch.compile(model=DDP(Net()))
fsdp2 = Net()
fully_shard(fsdp2)
fsdp2_compiled = torch.compile(fsdp2)
engine, _, _, _ = deepspeed.initialize(model=Net(), config={"train_batch_size": 8, "bf16": {"enabled": True}})
engine = torch.compile(engine)
plain = torch.compile(Net())
decorator = torch.compile(mode="reduce-overhead")
maybe = FSDP(Net())
maybe = torch.compile(maybe) if flag else maybe

def build(net):
    model = FSDP(net)
    return torch.compile(model)

built = build(Net())
"""


@pytest.mark.parametrize(
    "name, kind",
    [
        ("inline", "fsdp1"), ("rebound", "fsdp1"), ("compiled", "fsdp1"), ("compiled._orig_mod", "fsdp1"), ("original", "fsdp1"),
        ("ddp", "ddp"), ("fsdp2_compiled", "fsdp2"), ("fsdp2_compiled._orig_mod", "fsdp2"), ("engine", "deepspeed"),
        ("plain", None), ("decorator", None), ("built", "fsdp1"), ("built._orig_mod", "fsdp1"),
        ("maybe", "fsdp1"),
    ],
)
def test_the_wrapper_kind_survives_torch_compile(name, kind):
    """`torch.compile` returns an `OptimizedModule` over the same module (`_orig_mod`): the
    same parameters, the wrapper's own attributes (`clip_grad_norm_`, `backward`)."""
    view = file_view(COMPILED, "c.py")
    found = view.wrappers("c.py", "<module>", name)
    assert [w.kind for w in found] == ([kind] if kind else [])


def test_the_latest_binding_before_a_use_keeps_the_compiled_engine():
    """AMP805/AMP806 read the binding before the use: `engine = torch.compile(engine)` is still the engine."""
    view = file_view(COMPILED, "c.py")
    (engine,) = view.wrappers_at("c.py", "<module>", "engine", (99, 1))
    assert engine.deepspeed_engine
    assert [w.kind for w in view.wrappers_at("c.py", "<module>", "maybe", (99, 1))] == ["fsdp1"]


def test_a_compiled_model_passed_to_a_trainer_in_another_file_keeps_its_wrapper(tmp_path):
    (tmp_path / "pyproject.toml").write_text('[project]\nname = "t"\nversion = "0"\n')
    (tmp_path / "trainer.py").write_text(
        "import torch\n\nclass Trainer:\n    def __init__(self, model):\n        self.model = model\n\n"
        "    def step(self, x):\n        self.model(x).sum().backward()\n"
        "        torch.nn.utils.clip_grad_norm_(self.model.parameters(), 1.0)\n"
    )
    (tmp_path / "train.py").write_text(
        "import torch\nfrom torch.distributed.fsdp import FullyShardedDataParallel as FSDP\nfrom trainer import Trainer\n\n"
        "def main():\n    model = FSDP(Net())\n    Trainer(torch.compile(model))\n"
    )
    assert findings([tmp_path]) == [("trainer.py", 9, "AMP801")]


def test_a_parameter_compiled_in_place_still_reads_what_the_callers_pass():
    """`model = torch.compile(model)` on a parameter: the name keeps the argument's wrapper."""
    source = (
        "import torch\nfrom torch.distributed.fsdp import FullyShardedDataParallel as FSDP\n\n"
        "def train(model, x):\n    model = torch.compile(model)\n    model(x).sum().backward()\n"
        "    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)\n\n"
        "train(FSDP(Net()), batch)\nnet = FSDP(Net())\ntrain(net, batch)\n"
    )
    view = file_view(source, "p.py")
    assert [w.kind for w in view.wrappers("p.py", "train", "model")] == ["fsdp1"]


def test_the_wrappers_carry_their_precision():
    view = file_view(WRAPPERS, "w.py")
    (fsdp1,) = view.wrappers("w.py", "<module>", "fsdp1")
    assert fsdp1.policy is not None and fsdp1.policy.param == "bf16" and fsdp1.policy.effective_reduce == "bf16"
    (engine,) = view.wrappers("w.py", "<module>", "engine")
    assert engine.deepspeed_engine and engine.config is not None and engine.config.enabled("bf16") is True
    (optimizer,) = view.wrappers("w.py", "<module>", "ds_optimizer")
    assert optimizer.kind == "deepspeed" and optimizer.element == 1 and not optimizer.deepspeed_engine
    (fabric,) = view.wrappers("w.py", "<module>", "fabric_model")
    assert fabric.strategy == "fsdp" and fabric.sharded_fsdp1 and fabric.policy.reduce == "bf16"


def test_the_per_file_view_reads_no_config_file(tmp_path):
    (tmp_path / "ds.json").write_text('{"train_batch_size": 8, "fp16": {"enabled": true}}')
    source = 'import deepspeed\nengine, opt, _, _ = deepspeed.initialize(model=m, config="ds.json")\n'
    view = file_view(source, str(tmp_path / "t.py"))
    (engine,) = view.wrappers(str(tmp_path / "t.py"), "<module>", "engine")
    assert engine.config is None and not view.configs_read, "a per-file result must not depend on another file's bytes"


# ------------------------------------------------------------------ config readers


def test_json_keys_keep_their_lines():
    parsed = configs.parse_json('{\n  "train_batch_size": 8,\n  "fp16": {\n    "enabled": true,\n    "loss_scale": 128\n  }\n}')
    assert parsed.get("fp16", "loss_scale") == 128
    assert parsed.where("fp16", "loss_scale") == (5, 5) and parsed.where("fp16") == (3, 3)


def test_yaml_subset_reads_what_accelerate_writes():
    text = (
        "compute_environment: LOCAL_MACHINE\ndeepspeed_config:\n  deepspeed_config_file: ds.json  # zero-2\n"
        "  zero3_init_flag: false\ndistributed_type: DEEPSPEED\nfsdp_config: {}\nmixed_precision: 'bf16'\n"
    )
    parsed = configs.parse_yaml(text)
    assert parsed.values == {
        "compute_environment": "LOCAL_MACHINE",
        "deepspeed_config": {"deepspeed_config_file": "ds.json", "zero3_init_flag": False},
        "distributed_type": "DEEPSPEED",
        "fsdp_config": {},
        "mixed_precision": "bf16",
    }
    assert parsed.where("mixed_precision") == (7, 1) and parsed.where("deepspeed_config", "deepspeed_config_file") == (3, 3)


@pytest.mark.parametrize("value", ["&anchor fp16", "*alias", "!!str fp16", "|", "{a: 1}", "[fp16]"])
def test_yaml_beyond_the_subset_is_unknown_not_guessed(value):
    parsed = configs.parse_yaml(f"distributed_type: DEEPSPEED\nmixed_precision: {value}\n")
    assert "mixed_precision" not in parsed.values


def test_config_files_are_read_only_inside_the_project(tmp_path):
    project = tmp_path / "p"
    (project / "sub").mkdir(parents=True)
    (project / "ds.json").write_text("{}")
    (tmp_path / "outside.json").write_text("{}")
    naming = str(project / "sub" / "train.py")
    assert configs.resolve("ds.json", naming, str(project)) == os.path.realpath(project / "ds.json")
    assert configs.resolve("../outside.json", str(project / "train.py"), str(project)) is None
    assert configs.resolve(str(tmp_path / "outside.json"), naming, str(project)) is None
    os.symlink(tmp_path / "outside.json", project / "link.json")
    assert configs.resolve("link.json", naming, str(project)) is None, "a link leading out of the project"
    assert configs.resolve("train.py", naming, str(project)) is None, "only config suffixes"


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="named pipes")
def test_a_named_pipe_called_ds_config_json_is_never_opened(tmp_path):
    os.mkfifo(tmp_path / "ds.json")
    assert configs.load(str(tmp_path / "ds.json")) is None  # returns at once: stat first, never open


def test_a_huge_config_is_not_read(tmp_path):
    (tmp_path / "ds.json").write_text('{"fp16": {"enabled": true}, "pad": "' + "x" * configs.MAX_BYTES + '"}')
    assert configs.load(str(tmp_path / "ds.json")) is None


# ------------------------------------------------------------------ the engine and config files


def test_config_file_findings_follow_the_config_on_a_warm_run(tmp_path):
    project = tmp_path / "p"
    shutil.copytree(PROJECTS / "deepspeed_config", project)
    store = tmp_path / "cache"
    cache = Cache(str(store), "fp")
    before = findings([project], cache)
    cache.save()
    assert ("configs/ds_zero2.json", 7, "AMP807") in before
    ds = project / "configs" / "ds_zero2.json"
    ds.write_text(ds.read_text().replace('"loss_scale": 128', '"loss_scale": 0'))
    warm = Cache(str(store), "fp")
    after = findings([project], warm)
    assert ("configs/ds_zero2.json", 7, "AMP807") not in after, "the recorded project findings must not outlive the JSON they read"
    assert ("sft.py", 9, "AMP808") in after


STATIC = '{"train_micro_batch_size_per_gpu": 4, "fp16": {"enabled": true, "loss_scale": 1}}'


def _launched_project(tmp_path, imports="import deepspeed\n"):
    """A DeepSpeed script that takes its config from the command line (`--deepspeed_config`),
    and the JSON a shell script launches it with: the code never names the file."""
    project = tmp_path / "p"
    (project / "configs").mkdir(parents=True)
    (project / "pyproject.toml").write_text("[project]\nname='x'\n")
    (project / "train.py").write_text(
        imports + "import torch\nengine, opt, _, _ = deepspeed.initialize(args=args, model=model)\n"
        "for x in loader:\n    engine.backward(engine(x).sum())\n    engine.step()\n"
    )
    (project / "run.sh").write_text("deepspeed train.py --deepspeed_config configs/ds.json\n")
    (project / "configs" / "ds.json").write_text(STATIC)
    return project


def test_a_config_the_code_never_names_is_read_from_the_walk(tmp_path):
    project = _launched_project(tmp_path)
    assert ("configs/ds.json", 1, "AMP807") in findings([project])


def test_shipped_configs_are_read_only_where_the_code_may_launch_deepspeed(tmp_path):
    """No DeepSpeed, accelerate, transformers or Lightning import: a JSON shaped like a
    DeepSpeed config is somebody else's data, and the walk's JSON files are not read."""
    project = _launched_project(tmp_path, imports="from mylib import deepspeed\n")
    assert not [f for f in findings([project]) if f[2] in ("AMP807", "AMP808")]


def test_shipped_configs_follow_the_walk_excludes_and_gitignore(tmp_path):
    project = _launched_project(tmp_path)
    (project / "data").mkdir()
    (project / "data" / "ds.json").write_text(STATIC)
    (project / "outputs").mkdir()
    (project / "outputs" / "ds.json").write_text(STATIC)
    (project / ".gitignore").write_text("data/\n")
    config = Config(root=str(project), extend_exclude=("outputs",))
    found = {Path(d.filename).resolve().relative_to(project.resolve()).as_posix() for d in lint_paths([str(project)], config).diagnostics if d.code == "AMP807"}
    assert found == {"configs/ds.json"}


def test_a_new_shipped_config_is_seen_on_a_warm_run_and_a_subset_run_reuses_the_project(tmp_path, monkeypatch):
    from amplint.engine import crossfile

    project = _launched_project(tmp_path)
    (project / "configs" / "ds.json").write_text(STATIC.replace('"loss_scale": 1', '"loss_scale": 0'))
    store = tmp_path / "cache"
    cache = Cache(str(store), "fp")
    assert not [f for f in findings([project], cache) if f[2] == "AMP807"]
    cache.save()
    (project / "configs" / "zero3.json").write_text(STATIC)  # no code file changed
    warm = Cache(str(store), "fp")
    assert ("configs/zero3.json", 1, "AMP807") in findings([project], warm), "a config file that came must be read"
    warm.save()
    computed = []
    monkeypatch.setattr(crossfile._Store, "remember", lambda self, *a, **k: computed.append(a))
    again = Cache(str(store), "fp")
    found = lint_paths([str(project / "train.py")], Config(), cache=again).diagnostics
    assert {Path(d.filename).name for d in found} <= {"train.py"}
    assert not computed, "a subset run (which reports no config file) reuses what the whole run recorded"
    (project / "configs" / "zero3.json").unlink()
    computed.clear()
    assert not [f for f in findings([project], Cache(str(store), "fp")) if f[2] == "AMP807"]
    assert computed, "a config file that went: computed again"


def test_a_one_file_run_reports_no_config_file_finding():
    found = lint_paths([str(PROJECTS / "deepspeed_config" / "sft.py")], Config()).diagnostics
    assert {Path(d.filename).name for d in found} == {"sft.py"}


def test_a_cross_file_finding_brings_its_related_sites_to_the_per_file_one(tmp_path):
    """AMP805 in a file holding the engine and the clip: the per-file pass finds it without the
    JSON (it reads no other file), the project pass with it; one finding, naming the config."""
    (tmp_path / "pyproject.toml").write_text("[project]\nname='x'\n")
    (tmp_path / "ds.json").write_text('{"train_batch_size": 8, "gradient_clipping": 1.0, "fp16": {"enabled": true}}')
    (tmp_path / "train.py").write_text(
        "import torch\nimport deepspeed\nengine, opt, _, _ = deepspeed.initialize(model=model, config='ds.json')\n"
        "engine.backward(engine(x).sum())\ntorch.nn.utils.clip_grad_norm_(engine.parameters(), 1.0)\nengine.step()\n"
    )
    found = [d for d in lint_paths([str(tmp_path)], Config()).diagnostics if d.code == "AMP805"]
    assert len(found) == 1
    assert any(r.filename and r.filename.endswith("ds.json") for r in found[0].related)


def test_no_scale_summary_in_a_project_without_a_distributed_api(tmp_path):
    """The wrapper rules cost a project without FSDP/DeepSpeed/Fabric one role test per file."""
    (tmp_path / "pyproject.toml").write_text("[project]\nname='x'\n")
    (tmp_path / "train.py").write_text(
        "import json\nimport torch\ncfg = json.load(open('config.json'))\nscaler = torch.amp.GradScaler('cuda')\n"
        "opt = torch.optim.AdamW(model.parameters())\nfor x in loader:\n    with torch.autocast('cuda'):\n        loss = model(x)\n"
        "    scaler.scale(loss).backward()\n    scaler.unscale_(opt)\n    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)\n"
        "    scaler.step(opt)\n    scaler.update()\n"
    )
    cache = Cache(str(tmp_path / "cache"), "fp")
    lint_paths([str(tmp_path)], Config(), cache=cache)
    assert "scale" not in cache.built and not cache.entries["scale"]


# ------------------------------------------------------------------ the evidence script


def test_the_kernel_measurements_hold_on_this_torch():
    pytest.importorskip("torch")
    out = subprocess.run([sys.executable, str(ROOT / "scripts" / "measure_scale_kernels.py")], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    data = json.loads(out.stdout)
    assert data["scaled_mm"]["1024x1024"] == "ok"
    assert "divisible by 16" in data["scaled_mm"]["in 1000"] and "divisible by 16" in data["scaled_mm"]["out 10"]
    assert data["cpu_flash_fp32"] == "torch.float32"


# ------------------------------------------------------------------ AMP105's project half: an fp16 FSDP policy


def _fallback_project(root: Path, choose: str = None, train_tail: str = None, backward: str = None) -> Path:
    shutil.copytree(PROJECTS / "fsdp_fp16_fallback", root)
    utils = root / "lmtrain" / "utils.py"
    text = utils.read_text()
    if choose is not None:
        start = text.index("def get_mixed_precision_policy")
        end = text.index("def get_policies")
        text = text[:start] + choose + "\n\n\n" + text[end:]
    if train_tail is not None:
        text = text.replace("        optimizer.step()\n        scheduler.step()\n", train_tail)
    if backward is not None:
        text = text.replace("        loss.backward()\n", backward)
    utils.write_text(text)
    return root


def test_an_fp16_fsdp_policy_fallen_back_to_is_backpropagated_without_scaling(tmp_path):
    root = _fallback_project(tmp_path / "p")
    (found,) = [d for d in lint_paths([str(root)], Config()).diagnostics if d.code == "AMP105"]
    assert found.message == "On GPUs without bf16, `loss` runs backward in the fp16 FSDP policy `fp16_policy`, unscaled"
    assert [(Path(r.filename or "lmtrain/utils.py").name, r.location.row) for r in found.related] == [
        ("train.py", 11), ("policies.py", 4), ("utils.py", 8),
    ]


def test_an_fp16_fsdp_policy_outright(tmp_path):
    root = _fallback_project(tmp_path / "p", choose="def get_mixed_precision_policy(cfg, rank):\n    return fp16_policy")
    (found,) = [d for d in lint_paths([str(root)], Config()).diagnostics if d.code == "AMP105"]
    assert found.message == "`loss` runs backward in the fp16 FSDP policy `fp16_policy` without loss scaling"


@pytest.mark.parametrize(
    "why, options",
    [
        ("fp16 is an opt-in flag, not a hardware fallback",
         {"choose": "def get_mixed_precision_policy(cfg, rank):\n    if cfg.use_fp16:\n        return fp16_policy\n    return bf16_policy"}),
        ("bf16 outright", {"choose": "def get_mixed_precision_policy(cfg, rank):\n    return bf16_policy"}),
        ("no optimizer step after the backward", {"train_tail": "        scheduler.step()\n"}),
        ("the loss is scaled", {"backward": "        scaler.scale(loss).backward()\n"}),
    ],
)
def test_an_fsdp_backward_that_is_scaled_bf16_or_opt_in_is_not_amp105(tmp_path, why, options):
    root = _fallback_project(tmp_path / "p", **options)
    assert [d for d in lint_paths([str(root)], Config()).diagnostics if d.code == "AMP105"] == [], why


def _hook_project(root: Path, scaler_file: str = None) -> Path:
    (root / "pyproject.toml").write_text("[project]\nname='detlite'\n")
    engine = root / "detlite" / "engine"
    engine.mkdir(parents=True)
    (engine / "ddp.py").write_text(
        "from torch.nn.parallel import DistributedDataParallel\n"
        "from torch.distributed.algorithms.ddp_comm_hooks import default as comm_hooks\n"
        "def create_ddp_model(model, fp16_compression=False):\n"
        "    ddp = DistributedDataParallel(model)\n"
        "    if fp16_compression:\n"
        "        ddp.register_comm_hook(state=None, hook=comm_hooks.fp16_compress_hook)\n"
        "    return ddp\n"
    )
    if scaler_file:
        path = root / scaler_file
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(
            "import torch\nclass AMPTrainer:\n    def __init__(self):\n        self.grad_scaler = torch.amp.GradScaler('cuda')\n"
            "    def run_step(self, loss):\n        self.grad_scaler.scale(loss).backward()\n"
        )
    return root


@pytest.mark.parametrize("scaler_file, claims_no_scaler", [
    (None, True), ("detlite/engine/train_loop.py", False), ("tests/test_amp.py", True),
])
def test_amp803_hook_message_knows_the_projects_scaler(tmp_path, scaler_file, claims_no_scaler):
    """The fp16 hook is reported either way (the fp16 all-reduce is real); 'no GradScaler' is
    said only where no file of the project (a test apart) builds one, and a scaler in another
    file is named as a related site."""
    root = _hook_project(tmp_path, scaler_file)
    found = [d for d in lint_paths([str(root)], Config()).diagnostics if d.code == "AMP803"]
    assert len(found) == 1 and found[0].filename.endswith("ddp.py")
    assert ("no GradScaler" in found[0].message) == claims_no_scaler, found[0].message
    named = [r for r in found[0].related if r.filename and r.filename.endswith("train_loop.py")]
    assert bool(named) == (not claims_no_scaler)


# ------------------------------------------------------------------ containers and overrides (read9 AMP801)

_CONTAINER_HEAD = (
    "import torch\nfrom dataclasses import dataclass\nfrom types import SimpleNamespace\nfrom torch import nn\n"
    "from torch.distributed.fsdp import FullyShardedDataParallel as FSDP, ShardingStrategy\n\n"
)


@pytest.mark.parametrize("why, source, flagged", [
    ("a namespace held in a `self.` attribute, clipped in another method",
     "class Trainer:\n    def __init__(self, net):\n        self.models = SimpleNamespace(generator=FSDP(net), ema=net)\n\n"
     "    def step(self, loss):\n        loss.backward()\n        nn.utils.clip_grad_norm_(self.models.generator.parameters(), 1.0)\n", True),
    ("a dataclass a builder returns, its field given positionally",
     "@dataclass\nclass Models:\n    generator: nn.Module\n    ema: nn.Module\n\n"
     "def build(net):\n    return Models(FSDP(net), net)\n\n"
     "def step(models, loss):\n    loss.backward()\n    nn.utils.clip_grad_norm_(models.generator.parameters(), 1.0)\n\n"
     "models = build(Net())\nstep(models, loss)\n", True),
    ("an attribute bound on the container after it is built",
     "def build(net):\n    models = SimpleNamespace()\n    models.generator = FSDP(net)\n    return models\n\n"
     "def step(models, loss):\n    loss.backward()\n    nn.utils.clip_grad_norm_(models.generator.parameters(), 1.0)\n\n"
     "models = build(Net())\nstep(models, loss)\n", True),
    ("the other field of the container is the plain module",
     "class Trainer:\n    def __init__(self, net):\n        self.models = SimpleNamespace(generator=FSDP(net), ema=Net())\n\n"
     "    def step(self, loss):\n        loss.backward()\n        nn.utils.clip_grad_norm_(self.models.ema.parameters(), 1.0)\n", False),
    ("a class whose own `__init__` decides its attributes is no container",
     "class Box:\n    def __init__(self, generator):\n        self.generator = Net()\n\n"
     "def step(models, loss):\n    loss.backward()\n    nn.utils.clip_grad_norm_(models.generator.parameters(), 1.0)\n\n"
     "models = Box(generator=FSDP(Net()))\nstep(models, loss)\n", False),
    ("a dataclass subclass given positional arguments: its base's fields come first",
     "@dataclass\nclass Base:\n    ema: nn.Module\n\n@dataclass\nclass Models(Base):\n    generator: nn.Module\n\n"
     "def step(models, loss):\n    loss.backward()\n    nn.utils.clip_grad_norm_(models.generator.parameters(), 1.0)\n\n"
     "models = Models(FSDP(Net()), Net())\nstep(models, loss)\n", False),
])
def test_the_wrapper_kind_is_followed_through_container_attributes(tmp_path, why, source, flagged):
    (tmp_path / "pyproject.toml").write_text('[project]\nname = "t"\nversion = "0"\n')
    (tmp_path / "train.py").write_text(_CONTAINER_HEAD + source)
    assert bool([f for f in findings([tmp_path]) if f[2] == "AMP801"]) == flagged, why


_TEMPLATE = (
    "import torch\nfrom dataclasses import dataclass\nfrom torch import nn\n"
    "from torch.distributed.fsdp import FullyShardedDataParallel as FSDP, ShardingStrategy\n\n"
    "class Core:\n    fsdp_defaults = {'sharding_strategy': ShardingStrategy.SHARD_GRAD_OP}\n\n"
    "    def __call__(self, loader):\n        models = self.setup_models()\n        for batch in loader:\n"
    "            self.backward_pass(self.forward_pass(batch, models), models)\n\n"
    "    def setup_models(self):\n        raise NotImplementedError\n\n"
    "    def forward_pass(self, batch, models):\n        raise NotImplementedError\n\n"
    "    def backward_pass(self, loss, models):\n        raise NotImplementedError\n\n"
    "class Experiment(Core):\n    @dataclass(frozen=True)\n    class Models:\n        generator: nn.Module\n\n"
    "    def setup_models(self):\n        return self.Models(generator=FSDP(Net(), **self.fsdp_defaults))\n\n"
    "    def forward_pass(self, batch, models):\n        return models.generator(batch).mean()\n\n"
    "    def backward_pass(self, loss, models):\n        loss.backward()\n"
    "        nn.utils.clip_grad_norm_(models.generator.parameters(), 1.0)\n\n"
    "class Other(Core):\n    fsdp_defaults = {}\n\n"
    "if __name__ == '__main__':\n    core = {owner}()\n{tail}    core(loader)\n"
)


@pytest.mark.parametrize("why, owner, tail, flagged", [
    ("the base class's loop runs the override on the experiment's models", "Experiment", "", True),
    ("the script sets NO_SHARD on the experiment's options: every rank holds the whole gradient",
     "Experiment", "    core.fsdp_defaults['sharding_strategy'] = ShardingStrategy.NO_SHARD\n", False),
    ("a strategy decided at run time may be NO_SHARD", "Experiment", "    core.fsdp_defaults['sharding_strategy'] = pick(args)\n", False),
    ("a sharding strategy set: still sharded", "Experiment", "    core.fsdp_defaults['sharding_strategy'] = ShardingStrategy.FULL_SHARD\n", True),
])
def test_a_base_class_loop_runs_the_subclass_override(tmp_path, why, owner, tail, flagged):
    (tmp_path / "pyproject.toml").write_text('[project]\nname = "t"\nversion = "0"\n')
    (tmp_path / "train.py").write_text(_TEMPLATE.replace("{owner}", owner).replace("{tail}", tail))
    assert bool([f for f in findings([tmp_path]) if f[2] == "AMP801"]) == flagged, why


def test_no_shard_set_on_another_experiment_does_not_silence_this_one(tmp_path):
    """Each script runs its own experiment: a NO_SHARD its `__main__` sets on an instance of an
    unrelated class says nothing of this class's wrap."""
    (tmp_path / "pyproject.toml").write_text('[project]\nname = "t"\nversion = "0"\n')
    (tmp_path / "train.py").write_text(_TEMPLATE.replace("{owner}", "Experiment").replace("{tail}", ""))
    (tmp_path / "other.py").write_text(
        "from torch.distributed.fsdp import ShardingStrategy\nfrom train import Other\n\n"
        "if __name__ == '__main__':\n    other = Other()\n    other.fsdp_defaults['sharding_strategy'] = ShardingStrategy.NO_SHARD\n    other(loader)\n"
    )
    assert [f for f in findings([tmp_path]) if f[2] == "AMP801"] == [("train.py", 36, "AMP801")]


# ------------------------------------------------------------------ Lightning's DeepSpeedStrategy and its precision (read9 AMP808)

_LIGHTNING_DS = (
    "import argparse\nimport lightning as L\nfrom lightning.pytorch.strategies import DeepSpeedStrategy\n\n"
    "def main(args):\n    low = args.precision in {compared}\n"
    "    strategy = DeepSpeedStrategy(config={config})\n"
    "    trainer = L.Trainer({trainer}, strategy=strategy)\n    trainer.fit(model)\n\n"
    "if __name__ == '__main__':\n    parser = argparse.ArgumentParser()\n"
    "    parser.add_argument('--precision', default={default})\n    parser.add_argument('--ds_config', default=None)\n"
    "    main(parser.parse_args())\n"
)


@pytest.mark.parametrize("why, fields, json_fp16, json_bf16, expected", [
    ("an fp16 value the code expects, on the bf16 config the command line names", {}, False, True, "warning"),
    ("the option's default is fp16: every run conflicts", {"default": "'16-mixed'"}, False, True, "error"),
    ("a bf16 precision on an fp16 config", {"default": "'bf16-mixed'", "compared": "['bf16-mixed']"}, True, False, "error"),
    ("the code expects only bf16 values", {"compared": "['bf16-mixed', 'bf16']"}, False, True, None),
    ("the config enables the Trainer's dtype too: DeepSpeed's own check (`enabled` both) is AMP808's other shape", {"default": "'16-mixed'"}, True, True, None),
    ("a precision spread from `vars(args)`", {"trainer": "**vars(args)"}, False, True, "warning"),
])
def test_a_lightning_precision_against_the_deepspeed_config_its_strategy_runs(tmp_path, why, fields, json_fp16, json_bf16, expected):
    values = {"compared": "['16-mixed', 'bf16']", "config": "args.ds_config", "trainer": "precision=args.precision", "default": "'bf16'", **fields}
    source = _LIGHTNING_DS
    for k, v in values.items():
        source = source.replace("{" + k + "}", v)
    (tmp_path / "pyproject.toml").write_text('[project]\nname = "t"\nversion = "0"\n')
    (tmp_path / "train.py").write_text(source)
    (tmp_path / "ds.json").write_text(json.dumps({
        "train_micro_batch_size_per_gpu": 4, "fp16": {"enabled": json_fp16}, "bf16": {"enabled": json_bf16}, "zero_optimization": {"stage": 2},
    }, indent=2))
    found = [d for d in lint_paths([str(tmp_path)], Config()).diagnostics if d.code == "AMP808" and d.filename.endswith("train.py")]
    if expected is None:
        assert not found, why
    else:
        assert len(found) == 1 and found[0].location.row == 7, why
        assert found[0].severity.value == expected, (why, found[0].severity)
        assert any(r.filename and r.filename.endswith("ds.json") for r in found[0].related), why


# ------------------------------------------------------------------ a DeepSpeed engine by config (read14 AMP805)


@pytest.mark.parametrize("test, body, orelse", [
    ("args.deepspeed", True, False),
    ("config.deepspeed.enable", True, False),
    ("args.deepspeed.enabled is True", True, False),
    ('hasattr(config, "deepspeed") and config.deepspeed.enable', True, False),
    ('not (hasattr(config, "deepspeed") and config.deepspeed.enable)', False, True),
    ('hasattr(config, "deepspeed")', None, False),
    ("config.deepspeed.enable and args.fp16", True, None),  # failing: fp16 off is enough
    ("args.deepspeed or args.use_deepspeed", True, False),
    ("args.deepspeed or args.fp16", None, False),
    ("config.enable", None, None),
    ("is_deepspeed_available()", None, None),
])
def test_deepspeed_in_use_reads_a_config_sections_switch(test, body, orelse):
    """`config.deepspeed.enable` is a DeepSpeed flag; an `and` failing (an `or` holding) says
    only what all its sides say; `hasattr(config, "deepspeed")` failing says DeepSpeed is off."""
    import ast

    from amplint.model.project.scale import deepspeed_in_use

    node = ast.parse(test, mode="eval").body
    assert (deepspeed_in_use(node), deepspeed_in_use(node, negated=True)) == (body, orelse)


def _run_time_engine_project(root: Path, step: str) -> Path:
    """InternVideo's shape: `setup_model` in another file returns the engine or the DDP model."""
    (root / "pyproject.toml").write_text("[project]\nname='vidlm'\n")
    (root / "vidlm").mkdir()
    (root / "vidlm" / "__init__.py").write_text("")
    (root / "vidlm" / "builder.py").write_text(
        "import torch\nimport deepspeed\n\n"
        "def setup_model(config, net):\n"
        "    if hasattr(config, 'deepspeed') and config.deepspeed.enable:\n"
        "        params = [p for p in net.parameters()]\n"
        "        scaler = None\n"
        "    else:\n"
        "        net = torch.nn.parallel.DistributedDataParallel(net)\n"
        "        optimizer = torch.optim.AdamW(net.parameters())\n"
        "        scaler = torch.cuda.amp.GradScaler()\n"
        "    if hasattr(config, 'deepspeed') and config.deepspeed.enable:\n"
        "        net, optimizer, _, _ = deepspeed.initialize(args=config, model=net, model_parameters=params)\n"
        "    return net, optimizer, scaler\n"
    )
    (root / "train.py").write_text(
        "import torch\nfrom vidlm.builder import setup_model\n\n"
        "def train_one_epoch(config, model, optimizer, scaler, loader):\n"
        "    for x in loader:\n" + step + "\n\n"
        "def main(config, net, loader):\n"
        "    model, optimizer, scaler = setup_model(config, net)\n"
        "    train_one_epoch(config, model, optimizer, scaler, loader)\n"
    )
    return root


_IF_ENGINE = (
    "        loss = model(x).sum()\n"
    "        if hasattr(config, 'deepspeed') and config.deepspeed.enable:\n"
    "            model.backward(loss)\n{engine_clip}"
    "            model.step()\n"
    "        else:\n"
    "            scaler.scale(loss).backward()\n"
    "            scaler.unscale_(optimizer)\n"
    "            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)\n"
    "            scaler.step(optimizer)\n"
    "            scaler.update()"
)


@pytest.mark.parametrize("why, step, flagged", [
    ("the clip in the `else` of `config.deepspeed.enable`: the DDP model", _IF_ENGINE.format(engine_clip=""), []),
    ("the clip after the engine's own backward, on its branch", _IF_ENGINE.format(
        engine_clip="            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)\n"), [("train.py", 9, "AMP805")]),
    ("torch AMP's GradScaler pass, no engine call: the engine only by config", (
        "        loss = model(x).sum()\n        scaler.scale(loss).backward()\n        scaler.unscale_(optimizer)\n"
        "        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)\n        scaler.step(optimizer)\n        scaler.update()"), []),
])
def test_a_clip_on_the_plain_path_of_a_run_time_engine(tmp_path, why, step, flagged):
    root = _run_time_engine_project(tmp_path, step)
    assert [f for f in findings([root]) if f[2].startswith("AMP80")] == flagged, why


# ------------------------------------------------------------------ the auto-wrap API and inherited clips (read16 AMP801)

_AUTOWRAP_UTILS = (
    "import contextlib\n"
    "from torch.distributed.fsdp import FullyShardedDataParallel as FSDP, ShardingStrategy\n"
    "from torch.distributed.fsdp.wrap import enable_wrap, wrap\n"
    "@contextlib.contextmanager\n"
    "def maybe_fsdp_wrap(opt):\n"
    "    if opt['backend'] not in ('zero2', 'zero3'):\n"
    "        yield\n"
    "        return\n"
    "    strategy = ShardingStrategy.FULL_SHARD if opt['backend'] == 'zero3' else {second}\n"
    "    fsdp_args = dict(sharding_strategy=strategy, use_orig_params=False)\n"
    "    with enable_wrap(wrapper_cls={cls}, **fsdp_args):\n"
    "        yield\n"
    "def fsdp_wrap(module):\n"
    "    return wrap(module)\n"
)
_AUTOWRAP_BASE = (
    "import torch\n"
    "class TorchAgent:\n"
    "    def update_params(self):\n"
    "        torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.opt['gradient_clip'])\n"
    "        self.optimizer.step()\n"
)
_AUTOWRAP_AGENT = (
    "from agentlib import utils\n"
    "from agentlib.base import TorchAgent\n"
    "class GeneratorAgent(TorchAgent):\n"
    "    def __init__(self, opt):\n"
    "        self.opt = opt\n"
    "        self.model = self.build_model()\n"
    "        with utils.maybe_fsdp_wrap(opt):\n"
    "            self.model = utils.fsdp_wrap(self.model)\n"
    "            if opt['fp16'] and opt['backend'] == 'ddp':\n"
    "                self.model = self.model.half()\n"
    "{override}"
)


@pytest.mark.parametrize("second, cls, override, expected", [
    ("ShardingStrategy.SHARD_GRAD_OP", "FSDP", "", [("agentlib/base.py", 4, "AMP801")]),
    ("ShardingStrategy.NO_SHARD", "FSDP", "", []),
    ("ShardingStrategy.SHARD_GRAD_OP", "MyWrapper", "", []),
    ("ShardingStrategy.SHARD_GRAD_OP", "FSDP", "    def update_params(self):\n        self.model.clip_grad_norm_(1.0)\n", []),
])
def test_amp801_follows_the_auto_wrap_context_and_the_subclass_binding(tmp_path, second, cls, override, expected):
    """`wrap(module)` inside `enable_wrap(wrapper_cls=FSDP, **fsdp_args)` (entered through a
    context manager of another module) is an FSDP1 wrap; the base class's `update_params` runs on
    the subclass's instance, whose `self.model` it is. Silent when a strategy may be NO_SHARD, the
    context names another class, or the subclass overrides the clipping method."""
    pkg = tmp_path / "agentlib"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    utils = _AUTOWRAP_UTILS.format(second=second, cls=cls)
    if cls != "FSDP":
        utils = "class MyWrapper:\n    pass\n" + utils
    (pkg / "utils.py").write_text(utils)
    (pkg / "base.py").write_text(_AUTOWRAP_BASE)
    (pkg / "agent.py").write_text(_AUTOWRAP_AGENT.format(override=override))
    assert [f for f in findings([tmp_path]) if f[2] == "AMP801"] == expected
