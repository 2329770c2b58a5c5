"""Checkpoints across files: an fp16 model saved by a trainer in another file (AMP401), and
a resume helper that never restores the GradScaler the loop owns (AMP402)."""
from __future__ import annotations

from pathlib import Path

import pytest
from typing import Dict, List

from amplint import Config, lint_paths

from .project_files import write_project

MODEL = """
from torch import nn

class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 2)

    def forward(self, x):
        return self.fc(x)
"""


def write(root: Path, files: Dict[str, str]) -> Path:
    return write_project(root, files)


def run(root: Path, codes: str, paths: List[str] = None):
    return lint_paths(paths or [str(root)], Config(select=frozenset(codes.split()))).diagnostics


def where(d) -> str:
    return f"{Path(d.filename).name}:{d.location.row}"


# ------------------------------------------------------------------ AMP401


def builder(cast: str) -> str:
    return f"""
        import torch
        from .net import Net

        def build(cfg):
            model = Net()
            model{cast}
            return model.cuda()
    """


TRAINER = """
    import torch
    from .builder import build

    def train(cfg, loader, out):
        model = build(cfg)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        for x, y in loader:
            loss = (model(x) - y).pow(2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
            torch.save({"model": model.state_dict(), "optimizer": opt.state_dict()}, out + "/last.pt")
        {after}
        torch.save(model.state_dict(), out + "/final.pt")
"""


def project(tmp_path: Path, cast: str, after: str = "pass") -> Path:
    return write(tmp_path, {
        "pkg/__init__.py": "",
        "pkg/net.py": MODEL,
        "pkg/builder.py": builder(cast),
        "pkg/engine.py": TRAINER.replace("{after}", after),
        "main.py": """
            from pkg.engine import train

            train(cfg, loader, "runs")
        """,
    })


def test_an_fp16_model_built_in_another_file_is_one_finding_per_trainer(tmp_path):
    root = project(tmp_path, ".half()")
    found = run(root, "AMP401")
    assert [where(d) for d in found] == ["engine.py:13"], "one bug, one finding"
    d = found[0]
    assert d.message == "`torch.save` writes the fp16 weights of `model`, a `Net` made fp16 elsewhere"
    assert [(Path(r.filename).name, r.location.row, r.message) for r in d.related] == [
        ("builder.py", 7, "made fp16 here"), ("engine.py", 15, "also saved"),
    ]
    assert [where(x) for x in run(root, "AMP401", [str(root / "pkg" / "engine.py")])] == ["engine.py:13"]


def test_bf16_fp32_casts_back_and_optimizer_state_stay_silent(tmp_path):
    assert run(project(tmp_path / "bf16", ".to(torch.bfloat16)"), "AMP401") == []
    assert run(project(tmp_path / "fp32", ".half()", after="model.float()"), "AMP401") == []
    root = project(tmp_path / "opt", ".half()")
    engine = root / "pkg" / "engine.py"
    engine.write_text(engine.read_text().replace('"model": model.state_dict(), ', "").replace("torch.save(model.state_dict()", "torch.save(opt.state_dict()"))
    assert run(root, "AMP401") == []


# ------------------------------------------------------------------ AMP402: the resume side

CKPT = """
    import torch

    def load_checkpoint(path, model, optimizer{extra}):
        state = torch.load(path, map_location="cpu")
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        {restore}
        return state["epoch"] + 1

    def save_checkpoint(path, model, optimizer, epoch):
        torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(), "epoch": epoch}, path)
"""

LOOP = """
    import torch
    from utils.ckpt import load_checkpoint, save_checkpoint

    def main(args, model, loader):
        optimizer = torch.optim.AdamW(model.parameters())
        scaler = torch.amp.GradScaler("cuda")
        start = load_checkpoint(args.resume, model, optimizer{passed}) if args.resume else 0
        for epoch in range(start, args.epochs):
            for x, y in loader:
                with torch.autocast("cuda"):
                    loss = model(x, y)
                scaler.scale(loss).backward()
                scaler.step(optimizer)
                scaler.update()
                optimizer.zero_grad()
            {save}
"""

OWN_SAVE = 'torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(), "epoch": epoch}, "last.pt")'
GOOD_SAVE = 'torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(), "scaler": scaler.state_dict()}, "last.pt")'


def resume_project(root: Path, save: str, extra: str = "", restore: str = "pass", passed: str = "") -> Path:
    return write(root, {
        "utils/__init__.py": "",
        "utils/ckpt.py": CKPT.replace("{extra}", extra).replace("{restore}", restore),
        "train.py": LOOP.replace("{passed}", passed).replace("{save}", save),
    })


def test_a_resume_helper_that_skips_the_scaler_is_found_at_the_call(tmp_path):
    root = resume_project(tmp_path, GOOD_SAVE)
    found = run(root, "AMP402")
    assert [where(d) for d in found] == ["train.py:8"]
    assert found[0].message == "`load_checkpoint` resumes `optimizer` but not `scaler`, and this call does not pass it"
    assert [(Path(r.filename).name, r.location.row) for r in found[0].related] == [("ckpt.py", 7)]
    assert [where(d) for d in run(root, "AMP402", [str(root / "train.py")])] == ["train.py:8"]


def test_the_resume_joins_the_save_finding_of_the_same_scaler(tmp_path):
    # the save through the helper (a cross-file finding): one finding, the resume related
    found = run(resume_project(tmp_path / "helper", "save_checkpoint('last.pt', model, optimizer, epoch)"), "AMP402")
    assert [where(d) for d in found] == ["train.py:17"]
    assert [(r.location.row, r.message) for r in found[0].related][-1] == (8, "restored without it")
    # the loop's own torch.save (a per-file finding): the same
    found = run(resume_project(tmp_path / "own", OWN_SAVE), "AMP402")
    assert [where(d) for d in found] == ["train.py:17"]
    assert [(r.location.row, r.message) for r in found[0].related] == [(8, "restored without it")]


def test_a_resume_that_restores_or_is_given_the_scaler_stays_silent(tmp_path):
    restores = resume_project(tmp_path / "r", GOOD_SAVE, extra=", scaler=None", restore='scaler.load_state_dict(state["scaler"])', passed=", scaler=scaler")
    assert run(restores, "AMP402") == []
    after = resume_project(tmp_path / "a", GOOD_SAVE)
    train = after / "train.py"
    train.write_text(train.read_text().replace("    for epoch", "    scaler.load_state_dict(torch.load(args.resume)['scaler'])\n    for epoch", 1))
    assert run(after, "AMP402") == []
    moved = resume_project(tmp_path / "m", GOOD_SAVE)
    ckpt = moved / "utils" / "ckpt.py"
    ckpt.write_text(ckpt.read_text().replace('state = torch.load(path, map_location="cpu")', "state = path"))
    assert run(moved, "AMP402") == [], "no torch.load: a state handed over, not a resume"


def test_a_scaler_that_only_ever_scales_bf16_needs_no_checkpoint(tmp_path):
    """Bert-VITS2 (read7): `GradScaler(enabled=hps.train.bf16_run)` beside `autocast(dtype=torch.bfloat16)`
    regions only; bf16 never overflows at any scale, so a resume restarting the scale loses nothing."""
    save = "save_checkpoint('last.pt', model, optimizer, epoch)"
    bf16 = resume_project(tmp_path / "bf16", save)
    train = bf16 / "train.py"
    train.write_text(train.read_text().replace('GradScaler("cuda")', 'GradScaler("cuda", enabled=args.bf16_run)')
                     .replace('torch.autocast("cuda")', 'torch.autocast("cuda", enabled=args.bf16_run, dtype=torch.bfloat16)'))
    assert run(bf16, "AMP402") == []
    assert run(bf16, "AMP402", [str(train)]) == []
    # the look-alikes: one region fp16 (CUDA's default), or fp16 spelled in the file (a dtype chosen at run time)
    for why, old, new in (
        ("an fp16 region too", "            scaler.scale(loss)", "            with torch.autocast('cuda'):\n                loss = loss + model.aux(x)\n            scaler.scale(loss)"),
        ("fp16 spelled", "def main(args, model, loader):", "def main(args, model, loader):\n    half = torch.float16 if args.fp16 else torch.bfloat16"),
    ):
        root = resume_project(tmp_path / why.replace(" ", "_"), save)
        train = root / "train.py"
        text = train.read_text().replace('torch.autocast("cuda")', 'torch.autocast("cuda", dtype=torch.bfloat16)').replace(old, new, 1)
        train.write_text(text)
        found = run(root, "AMP402")
        assert [d.data["helper"] for d in found] == ["save_checkpoint"], why


# ------------------------------------------------------------------ AMP402: a scaler out of the loop's reach

ENGINE = """
    import torch

    def train_one_epoch(model, loader, optimizer, args):
        scaler = torch.cuda.amp.GradScaler(enabled={enabled})
        for x, y in loader:
            with torch.cuda.amp.autocast(enabled=args.amp):
                loss = model(x, y)
            optimizer.zero_grad()
            scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()
        {tail}
"""

MAIN = """
    import torch
    import util.misc as utils
    from engine import train_one_epoch

    def main(args, model, loader):
        optimizer = torch.optim.AdamW(model.parameters())
        if args.resume:
            checkpoint = torch.load(args.resume, map_location="cpu")
            model.load_state_dict(checkpoint["model"])
            optimizer.load_state_dict(checkpoint["optimizer"])
        for epoch in range(args.epochs):
            {call}
            weights = {"model": model.state_dict(), "optimizer": optimizer.state_dict(), "epoch": epoch}
            utils.save_on_master(weights, "checkpoint.pth")
"""

MISC = """
    import torch

    def save_on_master(*args, **kwargs):
        torch.save(*args, **kwargs)
"""


def epoch_project(root: Path, enabled: str = "args.amp", tail: str = "pass", call: str = "train_one_epoch(model, loader, optimizer, args)") -> Path:
    return write(root, {
        "engine.py": ENGINE.replace("{enabled}", enabled).replace("{tail}", tail),
        "main.py": MAIN.replace("{call}", call),
        "util/__init__.py": "",
        "util/misc.py": MISC,
    })


def test_a_scaler_built_inside_the_epoch_function_cannot_be_checkpointed_by_the_loop(tmp_path):
    """issue 22 shape 9: `train_one_epoch` builds its own GradScaler (AMP107 finds it) and the
    outer loop's resume checkpoint, saved in another file, cannot hold its state."""
    root = epoch_project(tmp_path)
    found = run(root, "AMP402")
    assert [where(d) for d in found] == ["main.py:15"]
    assert "`train_one_epoch` builds for itself" in found[0].message
    assert [(Path(r.filename or "main.py").name, r.location.row, r.message) for r in found[0].related] == [
        ("engine.py", 5, "`scaler` built here, inside `train_one_epoch`"), ("main.py", 11, "restored without it"),
    ]
    assert [where(d) for d in run(root, "AMP402", [str(root / "main.py")])] == ["main.py:15"]
    assert [d.code for d in run(root, "AMP107")] == ["AMP107"], "the rebuilt scaler is AMP107's finding"


def test_a_scaler_the_epoch_function_returns_or_disables_is_not_this_finding(tmp_path):
    assert run(epoch_project(tmp_path / "off", enabled="False"), "AMP402") == []
    assert run(epoch_project(tmp_path / "ret", tail="return scaler"), "AMP402") == []
    assert run(epoch_project(tmp_path / "none", call="pass"), "AMP402") == []


FINAL_SAVE = """
import torch
from utils import save_checkpoint


class Trainer:
    def __init__(self, model, optimizer, args):
        self.model, self.optimizer, self.args = model, optimizer, args

    def train(self, loader):
        scaler = torch.amp.GradScaler("cuda", enabled=self.args.fp16)
        for epoch in range(self.args.epochs):
            for x, y in loader:
                with torch.autocast("cuda", enabled=self.args.fp16):
                    loss = self.model(x, y)
                self.optimizer.zero_grad()
                scaler.scale(loss).backward()
                scaler.step(self.optimizer)
                scaler.update()
        save_checkpoint({"state_dict": self.model.state_dict(), "optimizer": self.optimizer.state_dict()}, "final.pt")
"""

UTILS = """
import torch

def save_checkpoint(state, filename):
    torch.save(state, filename)
"""


def test_a_final_checkpoint_nothing_resumes_from_is_silent_until_a_file_resumes(tmp_path):
    """read4 (sthalles/SimCLR): the checkpoint written once after training, in a project that
    never restores an optimizer, loses nothing; a resume anywhere in the project brings it back."""
    quiet = write(tmp_path / "quiet", {"simclr.py": FINAL_SAVE, "utils.py": UTILS, "run.py": "import simclr\n"})
    assert run(quiet, "AMP402") == []
    resumed = write(tmp_path / "resumed", {
        "simclr.py": FINAL_SAVE, "utils.py": UTILS,
        "finetune.py": "import torch\n\ndef load(model, optimizer, path):\n    ckpt = torch.load(path)\n"
                       "    optimizer.load_state_dict(ckpt['optimizer'])\n",
    })
    assert [where(d) for d in run(resumed, "AMP402")] == ["simclr.py:20"]
    periodic = write(tmp_path / "periodic", {
        "simclr.py": FINAL_SAVE.replace("\n        save_checkpoint(", "\n            save_checkpoint("), "utils.py": UTILS,
    })
    assert [where(d) for d in run(periodic, "AMP402")] == ["simclr.py:20"]


# ------------------------------------------------------------------ AMP402: accelerate builds the scaler


ACC_HELPERS = """
    import torch

    def save_checkpoint(work_dir, epoch, model, optimizer=None, lr_scheduler=None):
        state = dict(state_dict=model.state_dict())
        if optimizer is not None:
            state["optimizer"] = optimizer.state_dict()
        if lr_scheduler is not None:
            state["scheduler"] = lr_scheduler.state_dict()
        torch.save(state, f"{work_dir}/epoch_{epoch}.pth")

    def load_checkpoint(path, model, optimizer=None):
        ckpt = torch.load(path, map_location="cpu")
        model.load_state_dict(ckpt["state_dict"])
        if optimizer is not None:
            optimizer.load_state_dict(ckpt["optimizer"])
"""


def acc_script(mixed: str = "config.mixed_precision", resume: str = "load_checkpoint(args.resume, model, optimizer=optimizer)",
               config: str = "Config.fromfile(args.config)", extra: str = "") -> str:
    return f"""
        import argparse
        import torch
        from accelerate import Accelerator
        from mmcv import Config
        from pkg.ckpt import load_checkpoint, save_checkpoint

        def train(model, optimizer, loader):
            for epoch in range(10):
                for x, y in loader:
                    loss = (model(x) - y).pow(2).mean()
                    accelerator.backward(loss)
                    optimizer.step()
                    optimizer.zero_grad()
                save_checkpoint("out", epoch, accelerator.unwrap_model(model), optimizer=optimizer)

        if __name__ == "__main__":
            parser = argparse.ArgumentParser()
            parser.add_argument("config")
            parser.add_argument("--resume")
            {extra}
            args = parser.parse_args()
            config = {config}
            accelerator = Accelerator(mixed_precision={mixed})
            model = torch.nn.Linear(4, 4)
            optimizer = torch.optim.AdamW(model.parameters())
            if args.resume:
                {resume}
            model, optimizer = accelerator.prepare(model, optimizer)
            train(model, optimizer, loader)
    """


def acc_project(tmp_path: Path, configs: Dict[str, str], **script) -> Path:
    files = {"pkg/__init__.py": "", "pkg/ckpt.py": ACC_HELPERS, "train.py": acc_script(**script)}
    files.update({f"configs/{name}.py": f'_base_ = []\nlr = 1e-4\nmixed_precision = "{value}"\n' for name, value in configs.items()})
    return write(tmp_path, files)


def acc402(root: Path):
    return [(where(d), d.severity.value) for d in run(root, "AMP402")]


def test_a_hand_written_checkpoint_under_an_fp16_config_misses_accelerates_scaler(tmp_path):
    root = acc_project(tmp_path, {"base": "fp16", "big": "fp16"})
    found = run(root, "AMP402")
    assert [where(d) for d in found] == ["train.py:15"]
    assert found[0].severity.value == "warning"
    notes = [r.message for r in found[0].related]
    assert "saved here without the scaler" in notes and "fp16 chosen here" in notes and "restored without it" in notes


def test_configs_that_offer_fp16_among_other_precisions_give_an_info(tmp_path):
    """Precision first: fp16 is one run-time choice of several, so the finding is an info naming it."""
    found = run(acc_project(tmp_path, {"base": "fp16", "big": "bf16"}), "AMP402")
    assert [(where(d), d.severity.value) for d in found] == [("train.py:15", "info")]
    assert found[0].message.startswith("when the config's mixed_precision is fp16: ")


def test_an_argparse_choice_of_fp16_gives_an_info(tmp_path):
    root = acc_project(tmp_path, {}, mixed="args.mixed_precision", config="args",
                       extra='parser.add_argument("--mixed_precision", choices=["no", "fp16", "bf16"], default="no")')
    assert acc402(root) == [("train.py:15", "info")]


OPTION_FP16 = 'parser.add_argument("--mixed-precision", type=str, default="fp16", choices=["no", "fp16", "bf16"])'


def test_an_argparse_option_defaulting_to_fp16_gives_a_warning(tmp_path):
    """The default run (and the shipped `accelerate launch train.py --mixed-precision="fp16"`, the
    value quoted) is fp16: no mere choice (REPA's train.py)."""
    root = acc_project(tmp_path, {}, mixed="args.mixed_precision", config="args", extra=OPTION_FP16)
    (root / "README.md").write_text('```bash\naccelerate launch train.py configs/a.py \\\n  --mixed-precision="fp16"\n```\n')
    found = run(root, "AMP402")
    assert [(where(d), d.severity.value) for d in found] == [("train.py:15", "warning")]
    assert not found[0].message.startswith("when ")
    assert "fp16 chosen here" in [r.message for r in found[0].related]


def test_an_fp16_default_that_a_shipped_command_overrides_stays_an_info(tmp_path):
    root = acc_project(tmp_path / "launched", {}, mixed="args.mixed_precision", config="args", extra=OPTION_FP16)
    (root / "train.sh").write_text('accelerate launch train.py configs/a.py --mixed-precision="bf16"\n')
    assert acc402(root) == [("train.py:15", "info")]
    bare = acc_project(tmp_path / "bare", {}, mixed="args.mixed_precision", config="args", extra=OPTION_FP16)
    (bare / "train.sh").write_text("torchrun --nproc_per_node 8 train.py configs/a.py --mixed-precision no\n")
    assert acc402(bare) == [("train.py:15", "info")]


def test_accelerate_checkpoints_bf16_and_unresumed_saves_stay_silent(tmp_path):
    assert acc402(acc_project(tmp_path / "bf16", {"base": "bf16", "big": "no"})) == []
    assert acc402(acc_project(tmp_path / "no_resume", {"base": "fp16"}, resume="pass")) == []
    assert acc402(acc_project(tmp_path / "weights_only", {"base": "fp16"}, resume="load_checkpoint(args.resume, model)")) == []
    saved = acc_project(tmp_path / "save_state", {"base": "fp16"},
                        resume="accelerator.load_state(args.resume); load_checkpoint(args.resume, model, optimizer=optimizer)")
    assert acc402(saved) == []
    parsed = acc_project(tmp_path / "parsed", {"base": "fp16"}, config="parser.parse_args()")
    assert acc402(parsed) == [], "a namespace from argparse is no config file's settings"
    assert acc402(acc_project(tmp_path / "literal_bf16", {}, mixed='"bf16"')) == []


def test_a_literal_fp16_accelerator_with_a_hand_written_checkpoint_is_a_warning(tmp_path):
    assert acc402(acc_project(tmp_path, {}, mixed='"fp16"')) == [("train.py:15", "warning")]


def test_only_settings_modules_count_as_configs(tmp_path):
    """A module with code (a `def`) that sets `mixed_precision` is no config a run loads; a key set
    to something other than one literal leaves the value unknown."""
    root = acc_project(tmp_path / "code", {})
    (root / "pkg" / "defaults.py").write_text('mixed_precision = "fp16"\n\ndef defaults():\n    return {"mixed_precision": mixed_precision}\n')
    assert acc402(root) == []
    root = acc_project(tmp_path / "computed", {"base": "fp16"})
    (root / "configs" / "env.py").write_text('import os\nmixed_precision = "fp16"\nmixed_precision = os.environ.get("MP", "bf16")\n')
    assert acc402(root) == []


# ------------------------------------------------------------------ AMP402: a scaler inside an optimizer wrapper

WRAPPER = """
    import torch

    class Optimizer:
        def __init__(self, name, parameters, lr, use_amp=False):
            self._name = name
            self._opt = torch.optim.Adam(parameters, lr=lr)
            self._scaler = torch.cuda.amp.GradScaler(enabled={enabled})
        {extra}
        def __call__(self, loss, params):
            self._opt.zero_grad()
            self._scaler.scale(loss).backward()
            self._scaler.unscale_(self._opt)
            torch.nn.utils.clip_grad_norm_(params, 100.0)
            self._scaler.step(self._opt)
            self._scaler.update()

    def collect_optim_state_dict(obj, path=""):
        out = {}
        for name, attr in obj.__dict__.items():
            if isinstance(attr, torch.optim.Optimizer):
                out[path + name] = attr.state_dict()
            elif hasattr(attr, "__dict__"):
                out.update(collect_optim_state_dict(attr, path + name + "."))
        return out

    def load_optim_state_dict(obj, states):
        for path, state in states.items():
            target = obj
            for key in path.split("."):
                target = getattr(target, key)
            target.load_state_dict(state)
"""

MODELS = """
    from torch import nn
    import tools

    class WorldModel(nn.Module):
        def __init__(self, config):
            super().__init__()
            self.encoder = nn.Linear(8, 8)
            self._model_opt = tools.Optimizer("model", self.parameters(), config.lr, use_amp=config.precision == 16)

    class Agent(nn.Module):
        def __init__(self, config):
            super().__init__()
            self._wm = WorldModel(config)
"""

TRAIN = """
    import torch
    import tools
    from models import Agent

    def main(config, logdir):
        agent = Agent(config).to(config.device)
        if (logdir / "latest.pt").exists():
            checkpoint = torch.load(logdir / "latest.pt")
            agent.load_state_dict(checkpoint["agent"])
            tools.load_optim_state_dict(agent, checkpoint["optims"])
        while agent.step < config.steps:
            agent.train_some()
            items = {
                "agent": agent.state_dict(),
                "optims": {save},
            }
            torch.save(items, logdir / "latest.pt")
"""


def wrapper_project(root: Path, enabled: str = "use_amp", extra: str = "", save: str = "tools.collect_optim_state_dict(agent)",
                    train: str = TRAIN) -> Path:
    return write(root, {
        "tools.py": WRAPPER.replace("{enabled}", enabled).replace("{extra}", extra),
        "models.py": MODELS,
        "train.py": train.replace("{save}", save),
    })


def test_a_scaler_inside_an_optimizer_wrapper_the_checkpoint_leaves_out(tmp_path):
    """issue 22 (read5): the GradScaler lives in a project class wrapping the optimizer; the
    resume checkpoint collects the optimizers of the agent (through its world model) and
    nothing saves the scaler."""
    found = run(wrapper_project(tmp_path), "AMP402")
    assert [where(d) for d in found] == ["train.py:16"]
    assert found[0].message == "This checkpoint saves `Optimizer`'s optimizer but not its GradScaler `_scaler`"
    assert [(Path(r.filename or "train.py").name, r.location.row) for r in found[0].related] == [("tools.py", 8), ("train.py", 18)]


def test_the_wrapped_optimizer_saved_by_its_attribute(tmp_path):
    found = run(wrapper_project(tmp_path, save="agent._wm._model_opt._opt.state_dict()"), "AMP402")
    assert [where(d) for d in found] == ["train.py:18"], "at the torch.save"


def test_a_scaler_holding_class_saving_its_own_optimizer_is_one_finding(tmp_path):
    """A trainer class keeping `self.scaler` and saving `self.optimizer.state_dict()` in its own
    file: the per-file finding, not a second one from the wrapper shape."""
    root = write(tmp_path, {"trainer.py": '''
        import torch

        class Trainer:
            def __init__(self, model, optimizer):
                self.model, self.optimizer = model, optimizer
                self.scaler = torch.amp.GradScaler("cuda")

            def step(self, loss):
                self.scaler.scale(loss).backward()
                self.scaler.step(self.optimizer)
                self.scaler.update()

            def save(self, path):
                torch.save({"model": self.model.state_dict(), "optimizer": self.optimizer.state_dict()}, path)

            def resume(self, path):
                state = torch.load(path)
                self.optimizer.load_state_dict(state["optimizer"])
    '''})
    assert [where(d) for d in run(root, "AMP402")] == ["trainer.py:15"]


@pytest.mark.parametrize(
    "why, options",
    [
        ("the scaler is disabled", {"enabled": "False"}),
        ("the wrapper's own state_dict may hold the scaler",
         {"extra": "def state_dict(self):\n            return {'opt': self._opt.state_dict(), 'scaler': self._scaler.state_dict()}\n"}),
        ("the scaler's state is saved", {"save": "[tools.collect_optim_state_dict(agent), agent._wm._model_opt._scaler.state_dict()]"}),
        ("the helper is given something that holds no wrapper", {"save": "tools.collect_optim_state_dict(config)"}),
        ("nothing resumes the optimizers", {"train": TRAIN.replace("tools.load_optim_state_dict(agent, checkpoint[\"optims\"])", "pass")}),
    ],
)
def test_a_wrapped_scaler_that_is_saved_or_not_in_play_is_not_flagged(tmp_path, why, options):
    assert run(wrapper_project(tmp_path, **options), "AMP402") == [], why


# ------------------------------------------------------------------ AMP402: a scaler of a bf16-only config


SEG_CONFIG = """
    import torch
    from dataclasses import dataclass
    from enum import Enum

    class ModelDtype(Enum):
        FLOAT32 = "float32"
        BFLOAT16 = "bfloat16"

        @property
        def autocast_dtype(self):
            return {ModelDtype.BFLOAT16: torch.bfloat16, ModelDtype.FLOAT32: torch.float32}[self]

    @dataclass
    class Config:
        model_dtype: ModelDtype = ModelDtype.FLOAT32
"""

SEG_TRAIN = """
    import torch

    def train_step(model, batch, scaler, optimizer, model_dtype):
        with torch.autocast("cuda", dtype=model_dtype, enabled=model_dtype is not None):
            loss = model(batch)
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()

    def train(config, model, loader, optimizer):
        scaler = torch.amp.GradScaler("cuda")
        for batch in loader:
            train_step(model, batch, scaler, optimizer, config.model_dtype.autocast_dtype)
        torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict()}, "final.pth")

    def resume(optimizer, path):
        optimizer.load_state_dict(torch.load(path)["optimizer"])
"""


def test_a_scaler_of_a_config_that_maps_only_to_bf16_or_fp32_is_silent(tmp_path):
    """The region's dtype is a config property threaded through `train_step`'s parameter, and the
    project's property maps only to bf16 and fp32: the scale never has to come down."""
    root = write(tmp_path / "bf16", {"config.py": SEG_CONFIG, "train.py": SEG_TRAIN})
    assert run(root, "AMP402") == []


@pytest.mark.parametrize(
    "files",
    [
        {"config.py": SEG_CONFIG.replace("torch.float32}", "torch.float16}"), "train.py": SEG_TRAIN},  # float16 mapped
        {"config.py": SEG_CONFIG, "train.py": SEG_TRAIN,  # another file calls train_step: it may pass float16
         "other.py": "import torch\nfrom train import train_step\n\ndef go(m, b, s, o):\n    train_step(m, b, s, o, torch.float16)\n"},
        {"config.py": SEG_CONFIG, "train.py": SEG_TRAIN.replace(
            "train_step(model, batch, scaler, optimizer, config.model_dtype.autocast_dtype)",
            "train_step(model, batch, scaler, optimizer, config.dtype)")},  # a read of another name: unknown
    ],
)
def test_a_scaler_that_may_scale_fp16_is_reported(tmp_path, files):
    assert [where(d) for d in run(write(tmp_path / "p", files), "AMP402")] == ["train.py:15"]


# ------------------------------------------------------------------ AMP402: a save wrapper inside the helper

WRAPPED_UTILS = """
    import shutil
    import torch

    def my_save(obj, path):
        tmp = path + ".tmp"
        torch.save(obj, tmp)
        shutil.move(tmp, path)

    def save_checkpoint(model, optimizer, lr, iteration, path{extra}):
        state_dict = model.state_dict()
        my_save({"model": state_dict, "iteration": iteration, "optimizer": optimizer.state_dict(), "learning_rate": lr{entry}}, path)
"""

WRAPPED_LOOP = """
    import torch
    from torch.cuda.amp import GradScaler, autocast
    import utils

    def train_epoch(epoch, hps, net, optim, scaler, loader):
        for x, y in loader:
            with autocast(enabled=hps.fp16_run):
                loss = net(x, y)
            optim.zero_grad()
            scaler.scale(loss).backward()
            scaler.step(optim)
            scaler.update()
        utils.save_checkpoint(net, optim, hps.lr, epoch, "G_%d.pth" % epoch{passed})

    def run(hps, net, loader):
        optim = torch.optim.AdamW(net.parameters(), hps.lr)
        scaler = GradScaler(enabled=hps.fp16_run)
        for epoch in range(hps.epochs):
            train_epoch(epoch, hps, net, optim, scaler, loader)
"""


def test_a_helper_saving_through_a_torch_save_wrapper_is_followed(tmp_path):
    """issue 22 (read10): the checkpoint helper hands its dict to a wrapper of its module
    (`my_save(obj, path)`: `torch.save` to a temporary name, then a move) instead of `torch.save`."""
    root = write(tmp_path / "bad", {"utils.py": WRAPPED_UTILS.replace("{extra}", "").replace("{entry}", ""),
                                    "train.py": WRAPPED_LOOP.replace("{passed}", "")})
    found = run(root, "AMP402")
    assert [where(d) for d in found] == ["train.py:14"]
    assert [(Path(r.filename).name, r.location.row) for r in found[0].related] == [("utils.py", 12)]
    # VALID twin: the scaler is passed and saved through the same wrapper
    good = write(tmp_path / "good", {"utils.py": WRAPPED_UTILS.replace("{extra}", ", scaler=None").replace("{entry}", ', "scaler": scaler.state_dict()'),
                                     "train.py": WRAPPED_LOOP.replace("{passed}", ", scaler=scaler")})
    assert run(good, "AMP402") == []
    # a wrapper that saves something else than what it is given is no save of the checkpoint
    other = write(tmp_path / "other", {"utils.py": WRAPPED_UTILS.replace("torch.save(obj, tmp)", "torch.save({}, tmp)").replace("{extra}", "").replace("{entry}", ""),
                                       "train.py": WRAPPED_LOOP.replace("{passed}", "")})
    assert run(other, "AMP402") == []


INHERITED_BASE = '''
class WrappedOptimizer(object):
    def __init__(self, cfg):
        self.cfg = cfg

    @property
    def optimizer(self):
        return self._optimizer

    def state_dict(self):
        return self.optimizer.state_dict()

    def load_state_dict(self, state_dict):
        self.optimizer.load_state_dict(state_dict)
'''

INHERITED_WRAPPER = '''
import torch
from optim.base import WrappedOptimizer


class AMPOptimizer(WrappedOptimizer):
    def __init__(self, cfg, fp32_optimizer):
        super().__init__(cfg)
        self.fp32_optimizer = fp32_optimizer
        self._grad_scaler = torch.cuda.amp.GradScaler({enabled})

    def backward(self, loss):
        self._grad_scaler.scale(loss).backward()

    def step(self):
        self.scaler.step(self.fp32_optimizer)
        self.scaler.update()

    @property
    def scaler(self):
        return self._grad_scaler
{extra}'''


def inherited_project(root: Path, enabled: str = "", extra: str = "", base: str = INHERITED_BASE) -> Path:
    return write(root, {
        "optim/__init__.py": "",
        "optim/base.py": base,
        "optim/amp.py": INHERITED_WRAPPER.replace("{enabled}", enabled).replace("{extra}", extra),
    })


def test_a_wrapper_inheriting_a_state_dict_without_its_scaler_is_found_at_the_class(tmp_path):
    """read13 (fairseq's `AMPOptimizer`): the wrapper builds and steps its own GradScaler but
    inherits the base's `state_dict()`, which returns the wrapped optimizer's state alone, so
    every checkpoint of the wrapper loses the loss scale."""
    found = run(inherited_project(tmp_path), "AMP402")
    assert [where(d) for d in found] == ["amp.py:6"]
    assert found[0].message == "`AMPOptimizer` inherits `WrappedOptimizer.state_dict()`, which leaves out `self._grad_scaler`"
    assert [(Path(r.filename).name, r.location.row) for r in found[0].related] == [("base.py", 10), ("base.py", 13)]


@pytest.mark.parametrize(
    "why, options",
    [
        ("the scaler is disabled", {"enabled": "enabled=False"}),
        ("the wrapper defines its own pair (the per-file check judges it)",
         {"extra": "\n    def state_dict(self):\n        return {'opt': self.optimizer.state_dict(), 'scaler': self.scaler.state_dict()}\n"}),
        ("the base's pair holds a scaler",
         {"base": INHERITED_BASE.replace("return self.optimizer.state_dict()", "return {'opt': self.optimizer.state_dict(), 'scaler': self.scaler.state_dict()}")}),
        ("a method of the wrapper saves the scaler's state elsewhere",
         {"extra": "\n    def scaler_state(self):\n        return self._grad_scaler.state_dict()\n"}),
        ("the base's state_dict carries no optimizer state",
         {"base": INHERITED_BASE.replace("return self.optimizer.state_dict()", "return {'cfg': self.cfg}")}),
    ],
)
def test_an_inherited_pair_that_keeps_or_needs_no_scaler_is_silent(tmp_path, why, options):
    assert run(inherited_project(tmp_path, **options), "AMP402") == [], why
