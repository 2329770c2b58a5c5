"""Calls through registries, configs and declared classes (the project model's dispatch view,
`amplint/model/project/dispatch.py`), which AMP303 follows to every class they can reach, and
star imports resolved across the project (issue 22 shapes 5 and 7)."""
from __future__ import annotations

import os
import shutil
import textwrap
from pathlib import Path
from typing import Dict, List

import pytest

from amplint import Config, lint_paths
from amplint.engine.cache import Cache
from amplint.model.project import Project, registering, summarize, text_index, universe
from amplint.model.project import dispatch

from .project_files import write_project

PROJECTS = Path(__file__).resolve().parents[1] / "fixtures" / "projects"

HEAD = """
    import torch
    import torch.nn as nn
    import torch.nn.functional as F
    {imports}

    {decorator}
    class FocalHead(nn.Module):
        def forward(self, x, y):
            return F.binary_cross_entropy(torch.sigmoid(x), y)
"""

TRAIN = """
    import torch
    {imports}

    {build}
    with torch.autocast("cuda", dtype=torch.float16):
        loss = model(x, y)
"""


def codes(root: Path) -> List[str]:
    result = lint_paths([str(root)], Config())
    return [f"{Path(d.filename).resolve().relative_to(root.resolve()).as_posix()}:{d.location.row} {d.code}" for d in result.diagnostics]


def findings(root: Path):
    return [d for d in lint_paths([str(root)], Config()).diagnostics if d.code == "AMP303"]


def project_of(root: Path) -> Project:
    files = sorted(str(p) for p in root.rglob("*.py"))
    texts = {f: Path(f).read_text() for f in files}
    index = lambda f: text_index(texts[f])  # noqa: E731
    chosen = universe(files, str(root), index)
    return Project(
        str(root), {f: summarize(texts[f]) for f in chosen}, files=files, load=lambda f: summarize(texts[f]),
        registering=registering(files, index),
    )


def head(decorator: str = "", imports: str = "") -> str:
    return textwrap.dedent(HEAD).format(decorator=decorator, imports=imports)


def train(build: str, imports: str = "") -> str:
    return textwrap.dedent(TRAIN).format(build=build, imports=imports)


# ------------------------------------------------------------------ registries


@pytest.mark.parametrize(
    "registry, decorator, imported, build",
    [
        # mmengine: a Registry object, `@MODELS.register_module()`, `MODELS.build(cfg)`
        ("from mmengine.registry import Registry\nMODELS = Registry('model')\n", "@MODELS.register_module()", "MODELS",
         "model = MODELS.build(cfg.model)"),
        # detectron2 / BasicSR: `@REG.register()`, `REG.get(name)(cfg)`
        ("from fvcore.common.registry import Registry\nMODELS = Registry('META_ARCH')\n", "@MODELS.register()", "MODELS",
         "model = MODELS.get(cfg.name)(cfg)"),
        # a dict filled by hand through a decorator, looked up by item
        ("MODELS = {}\n\ndef register(name):\n    def wrap(cls):\n        MODELS[name] = cls\n        return cls\n    return wrap\n",
         "@register('focal')", "register", "model = MODELS[cfg.name]()"),
        # a decorator a factory made for the registry (super-gradients)
        ("MODELS = {}\nLOSSES = {}\n\ndef make_register(registry):\n    def register(name=None):\n        def deco(cls):\n"
         "            registry[name or cls.__name__] = cls\n            return cls\n        return deco\n    return register\n\n"
         "register_model = make_register(MODELS)\nregister_loss = make_register(LOSSES)\n",
         "@register_model()", "register_model", "model = MODELS[cfg.name]()"),
    ],
    ids=["mmengine", "detectron2", "dict-decorator", "decorator-factory"],
)
def test_a_bce_head_registered_in_another_file_is_reached_through_the_registry(tmp_path, registry, decorator, imported, build):
    root = write_project(tmp_path, {
        "pkg/__init__.py": "",
        "pkg/registry.py": registry,
        "pkg/heads.py": head(decorator, f"from .registry import {imported}\n"),
        "train.py": train(build, "from pkg.registry import MODELS\nimport pkg.heads  # noqa: F401  (registers)\n"),
    })
    found = findings(root)
    assert [f"{Path(d.filename).name}:{d.location.row}" for d in found] == ["heads.py:11"]
    d = found[0]
    assert "(`FocalHead`, via registry `MODELS`)" in d.message and len(d.message) < 100
    notes = [r.message for r in d.related]
    assert notes[0] == "autocast entered here" and "calls `FocalHead.forward`" in notes
    assert "`FocalHead` is registered to `MODELS` here" in notes
    assert d.help and "with_logits" in d.help


def test_a_class_registered_to_another_registry_or_to_none_stays_silent(tmp_path):
    root = write_project(tmp_path, {
        "pkg/__init__.py": "",
        "pkg/registry.py": "from mmengine.registry import Registry\nMODELS = Registry('model')\nLOSSES = Registry('loss')\n",
        "pkg/heads.py": head("@LOSSES.register_module()", "from .registry import LOSSES\n"),
        "pkg/legacy.py": head("", "").replace("FocalHead", "OldHead"),
        "train.py": train("model = MODELS.build(cfg.model)", "from pkg.registry import MODELS\nimport pkg.heads, pkg.legacy  # noqa\n"),
    })
    assert findings(root) == []


def test_registration_calls_external_registries_and_getattr_on_a_module(tmp_path):
    root = write_project(tmp_path, {
        "pkg/__init__.py": "",
        "pkg/registry.py": "from fvcore.common.registry import Registry\nHEADS = Registry('head')\n",
        "pkg/heads.py": head("", "from .registry import HEADS\n") + "\nHEADS.register(FocalHead)\n",
        "pkg/ext_heads.py": head("@MODELS.register_module()", "from mmdet.registry import MODELS\n").replace("FocalHead", "ExtHead"),
        "pkg/losses.py": head().replace("FocalHead", "FocalLoss"),
        "train.py": """
            import torch
            from mmdet.registry import MODELS
            from pkg import losses
            from pkg.registry import HEADS

            head = HEADS.get(name)()
            ext = MODELS.build(cfg)
            criterion = getattr(losses, cfg.loss)()
            with torch.autocast("cuda"):
                loss = head(x, y) + ext(x, y) + criterion(x, y)
        """,
    })
    found = {Path(d.filename).name: d.message for d in findings(root)}
    assert set(found) == {"heads.py", "ext_heads.py", "losses.py"}
    assert "via registry `HEADS`" in found["heads.py"]
    assert "via registry `MODELS`" in found["ext_heads.py"]
    assert "(`FocalLoss`, via `getattr(losses, ...)`)" in found["losses.py"]


def test_a_model_func_handed_to_the_trainer_and_a_builder_function(tmp_path):
    root = write_project(tmp_path, {
        "pkg/__init__.py": "",
        "pkg/zoo.py": "_MODELS = {}\n\ndef register_model(fn):\n    _MODELS[fn.__name__] = fn\n    return fn\n\n"
                      "def create_model(name, **kwargs):\n    return _MODELS[name](**kwargs)\n",
        "pkg/heads.py": head("", "from .zoo import register_model\n") + "\n\n@register_model\ndef focal(**kwargs):\n    return FocalHead()\n",
        "pkg/engine.py": """
            import torch

            class Trainer:
                def __init__(self, model_func, name):
                    self.model = model_func(name)
                    self.scaler = torch.amp.GradScaler("cuda")

                def step(self, x, y):
                    with torch.autocast("cuda", enabled=self.amp):
                        return self.model(x, y)
        """,
        "train.py": "from pkg.engine import Trainer\nfrom pkg.zoo import create_model\nimport pkg.heads  # noqa\n\nTrainer(create_model, 'focal').step(x, y)\n",
    })
    found = findings(root)
    assert [Path(d.filename).name for d in found] == ["heads.py"]
    assert "via registry `_MODELS`" in found[0].message  # the registered function, then what it returns


def test_a_declared_base_class_a_property_and_a_return_annotation(tmp_path):
    """nerfstudio's shape: `pipeline: Pipeline` on the trainer, `self.model` a property returning
    `module_wrapper(self._model)` declared `-> Model`, the BCE in a subclass of `Model`; the
    autocast is entered under a run-time flag (`enabled=self.mixed_precision`), a precision path
    the project offers."""
    root = write_project(tmp_path, {
        "kit/__init__.py": "",
        "kit/base.py": "import torch.nn as nn\n\nclass Model(nn.Module):\n    def get_loss_dict(self, outputs, batch):\n        raise NotImplementedError\n",
        "kit/surface.py": """
            import torch.nn.functional as F
            from .base import Model

            class SurfaceModel(Model):
                def get_loss_dict(self, outputs, batch):
                    return {"mask": F.binary_cross_entropy(outputs["w"].clip(1e-3, 1 - 1e-3), batch["m"])}
        """,
        "kit/utils.py": "from .base import Model\n\ndef module_wrapper(m) -> Model:\n    return getattr(m, 'module', m)\n",
        "kit/pipeline.py": """
            from .utils import module_wrapper

            class Pipeline:
                def __init__(self, config):
                    self._model = config.model.setup()

                @property
                def model(self):
                    return module_wrapper(self._model)

                def get_train_loss_dict(self, batch):
                    return self.model.get_loss_dict(self._model(batch), batch)
        """,
        "kit/trainer.py": """
            import torch
            from .pipeline import Pipeline

            class Trainer:
                pipeline: Pipeline

                def __init__(self, config):
                    self.mixed_precision = config.mixed_precision
                    self.grad_scaler = torch.amp.GradScaler("cuda", enabled=self.mixed_precision)

                def setup(self):
                    self.pipeline = self.config.pipeline.setup()

                def train_iteration(self, batch):
                    with torch.autocast(device_type="cuda", enabled=self.mixed_precision):
                        loss_dict = self.pipeline.get_train_loss_dict(batch)
                    self.grad_scaler.scale(sum(loss_dict.values())).backward()
        """,
    })
    found = findings(root)
    assert [f"{Path(d.filename).name}:{d.location.row}" for d in found] == ["surface.py:7"]
    assert "(`SurfaceModel`, as a `Model`)" in found[0].message
    assert "calls `SurfaceModel.get_loss_dict`" in [r.message for r in found[0].related]


def test_a_shared_factory_base_gives_each_subclass_its_own_registry(tmp_path):
    """`LossesFactory(BaseFactory)` calls `super().__init__(LOSSES)`, `BaseFactory.get` returns
    `self.type_dict[name]()`: a `LossesFactory().get(...)` gives a loss, not a model."""
    root = write_project(tmp_path, {
        "pkg/__init__.py": "",
        "pkg/registry.py": "LOSSES = {}\nMODELS = {}\n\ndef register_loss(cls):\n    LOSSES[cls.__name__] = cls\n    return cls\n\n"
                           "def register_model(cls):\n    MODELS[cls.__name__] = cls\n    return cls\n",
        "pkg/factories.py": """
            from .registry import LOSSES, MODELS

            class BaseFactory:
                def __init__(self, type_dict):
                    self.type_dict = type_dict

                def get(self, name):
                    return self.type_dict[name]()

            class LossesFactory(BaseFactory):
                def __init__(self):
                    super().__init__(LOSSES)

            class ModelsFactory(BaseFactory):
                def __init__(self):
                    super().__init__(MODELS)
        """,
        "pkg/losses.py": head("@register_loss", "from .registry import register_loss\n").replace("FocalHead", "FocalLoss"),
        "pkg/gan.py": head("@register_model", "from .registry import register_model\n").replace("FocalHead", "Discriminator"),
        "pkg/trainer.py": """
            import torch
            from .factories import LossesFactory

            class Trainer:
                def __init__(self, loss):
                    self.criterion = LossesFactory().get(loss)
                    self.scaler = torch.amp.GradScaler("cuda")

                def step(self, x, y):
                    with torch.autocast("cuda"):
                        return self.criterion(x, y)
        """,
    })
    found = findings(root)
    assert [Path(d.filename).name for d in found] == ["losses.py"]
    assert "via registry `LOSSES`" in found[0].message


def test_other_questions_do_not_follow_a_registry(tmp_path):
    """Only AMP303 asks the dispatch view: the project model itself still knows nothing of a
    value picked by name."""
    root = write_project(tmp_path, {
        "pkg/__init__.py": "",
        "pkg/registry.py": "from mmengine.registry import Registry\nMODELS = Registry('model')\n",
        "pkg/heads.py": head("@MODELS.register_module()", "from .registry import MODELS\n"),
        "train.py": train("model = MODELS.build(cfg.model)", "from pkg.registry import MODELS\nimport pkg.heads  # noqa\n"),
    })
    project = project_of(root)
    script = str(root / "train.py")
    assert project.name_types(script, "<module>", "model") == frozenset()
    view = dispatch.dispatch_view(project)
    assert view is not None
    assert {t[2] for t in view.name_types(script, "<module>", "model")} == {"FocalHead"}
    assert project.name_types(script, "<module>", "model") == frozenset(), "the view has memos of its own"


def test_no_bce_no_dispatch_view(tmp_path, monkeypatch):
    """A project with no BCE pays nothing for registries; one whose autocasts are all disabled
    builds no view either."""
    built = []
    original = dispatch.DispatchView.__init__

    def counting(self, *args, **kwargs):
        built.append(1)
        original(self, *args, **kwargs)

    monkeypatch.setattr(dispatch.DispatchView, "__init__", counting)
    root = write_project(tmp_path / "a", {
        "pkg/__init__.py": "",
        "pkg/registry.py": "from mmengine.registry import Registry\nMODELS = Registry('model')\n",
        "pkg/heads.py": head("@MODELS.register_module()", "from .registry import MODELS\n").replace("binary_cross_entropy(", "mse_loss("),
        "train.py": train("model = MODELS.build(cfg.model)", "from pkg.registry import MODELS\n"),
    })
    files = sorted(str(p) for p in root.rglob("*.py"))
    assert registering(files, lambda f: text_index(Path(f).read_text())) == []
    assert codes(root) == [] and not built
    shielded = write_project(tmp_path / "b", {
        "pkg/__init__.py": "",
        "pkg/registry.py": "from mmengine.registry import Registry\nMODELS = Registry('model')\n",
        "pkg/heads.py": head("@MODELS.register_module()", "from .registry import MODELS\n"),
        "train.py": train("model = MODELS.build(cfg.model)", "from pkg.registry import MODELS\n").replace('"cuda", dtype=torch.float16', '"cuda", enabled=False'),
    })
    assert findings(shielded) == [] and not built


def test_a_new_registered_file_is_seen_by_a_warm_run(tmp_path):
    root = tmp_path / "p"
    shutil.copytree(PROJECTS / "bce_registry_ok", root)
    for path in root.rglob("*"):
        os.utime(path, (path.stat().st_atime - 60, path.stat().st_mtime - 60))
    store = str(tmp_path / "cache")

    def run() -> List[str]:
        cache = Cache(store, "fp")
        found = [f"{Path(d.filename).name}:{d.location.row}" for d in lint_paths([str(root)], Config(), cache=cache).diagnostics if d.code == "AMP303"]
        cache.save()
        return found

    assert run() == [] and run() == []
    (root / "detkit" / "models" / "heads" / "iou_head.py").write_text(
        head("@MODELS.register_module()", "from ...registry import MODELS\n").replace("FocalHead", "IoUHead")
    )
    assert run() == ["iou_head.py:11"]


# ------------------------------------------------------------------ star imports


def test_star_imports_resolve_project_names_and_respect_all(tmp_path):
    root = write_project(tmp_path, {
        "models/__init__.py": "from .heads import *\n",
        "models/heads.py": head() + "\n\nclass Hidden(FocalHead):\n    pass\n\n\nclass _Private(FocalHead):\n    pass\n\n__all__ = ['FocalHead', 'make']\n\ndef make():\n    return FocalHead()\n",
        "train.py": """
            import torch
            from models import *

            head = make()
            with torch.autocast("cuda"):
                loss = head(x, y)
        """,
        "other.py": """
            import torch
            from models.heads import *

            with torch.autocast("cuda"):
                loss = Hidden()(x, y)  # not in `__all__`: a NameError, not a finding
        """,
    })
    assert codes(root) == ["models/heads.py:10 AMP303"]
    project = project_of(root)
    other = str(root / "other.py")
    assert project.symbol(other, "Hidden") == frozenset()
    assert {t[2] for t in project.symbol(str(root / "train.py"), "FocalHead")} == {"FocalHead"}


def test_a_star_import_without_all_exports_public_names_and_torch(tmp_path):
    root = write_project(tmp_path, {
        "utils/__init__.py": "",
        "utils/general.py": "import torch\nimport torch.nn.functional as F\n\ndef bce(p, y):\n    return F.binary_cross_entropy(p, y)\n\ndef _helper():\n    pass\n",
        "train.py": """
            from utils.general import *

            with torch.autocast("cuda"):
                loss = bce(torch.sigmoid(x), y)
        """,
    })
    assert codes(root) == ["utils/general.py:5 AMP303"]
    project = project_of(root)
    script = str(root / "train.py")
    assert project.symbol(script, "_helper") == frozenset()
    assert project.symbol(script, "torch") == frozenset({("X", "torch")})


# ------------------------------------------------------------------ a class looked up by name (issue 22, read5)

LOOKUP_TRAINER = """
    import torch

    class BaseTrainer:
        def __init__(self, config, model):
            self.model = model

    class Trainer(BaseTrainer):
        def __init__(self, config, model):
            super(Trainer, self).__init__(config, model)
            self.optimizer = torch.optim.Adam(self.model.parameters(), lr=1e-3)

        def train_epoch(self, data):
            step = self.model.calculate_loss
            for batch in data:
                with torch.autocast(device_type=self.device.type, enabled=self.amp):
                    loss = step(batch)
                loss.backward()
                self.optimizer.step()
"""


def _lookup_project(tmp_path, name_expr: str, lookup_body: str = ""):
    return write_project(tmp_path, {
        "rec/__init__.py": "", "rec/models/__init__.py": "", "rec/models/ctr/__init__.py": "", "rec/legacy/__init__.py": "",
        "rec/models/ctr/fm.py": head().replace("FocalHead", "FM").replace("def forward", "def calculate_loss").replace("(self, x, y)", "(self, batch)").replace("(torch.sigmoid(x), y)", "(torch.sigmoid(batch), batch)"),
        "rec/legacy/old.py": head().replace("FocalHead", "OldFM").replace("def forward", "def calculate_loss").replace("(self, x, y)", "(self, batch)").replace("(torch.sigmoid(x), y)", "(torch.sigmoid(batch), batch)"),
        "rec/utils.py": f"""
            import importlib

            def get_model(name):
            {lookup_body or f"    module = importlib.import_module({name_expr})"}
                return getattr(module, name)

            def get_trainer(name):
                return getattr(importlib.import_module("rec.trainer"), name + "Trainer")
        """,
        "rec/trainer.py": LOOKUP_TRAINER,
        "run.py": """
            from rec.utils import get_model, get_trainer

            model = get_model(config["model"])(config).to(config["device"])
            get_trainer(config["model"])(config, model).train_epoch(data)
        """,
    })


@pytest.mark.parametrize(
    "name_expr",
    ['"rec.models.ctr." + name.lower()', 'f"rec.models.ctr.{name.lower()}"', '".".join(["rec.models", "ctr", name.lower()])',
     '"rec.models.%s" % name', '"rec.models.{}".format(name)'],
    ids=["concat", "f-string", "join", "percent", "format"],
)
def test_a_class_looked_up_by_name_in_a_package_is_every_class_of_its_modules(tmp_path, name_expr):
    """RecBole's `get_model(config["model"])`: `getattr(importlib.import_module(<package> + name), name)`
    may give any class of the package's modules; the trainer, looked up the same way in a literal
    module, runs its `calculate_loss` under autocast (`super(Trainer, self).__init__` binds it)."""
    found = findings(_lookup_project(tmp_path, name_expr))
    assert [Path(d.filename).name for d in found] == ["fm.py"]  # not the legacy module outside the package
    assert "(`FM`, via `getattr(module, ...)`)" in found[0].message


def test_a_looked_up_name_bound_to_a_local_first(tmp_path):
    body = "\n            ".join([  # the template's indentation, for its dedent
        '    for family in ("general", "ctr"):', '        path = ".".join(["rec.models", family, name.lower()])',
        "        module = importlib.import_module(path)",
    ])
    assert [Path(d.filename).name for d in findings(_lookup_project(tmp_path, "", body))] == ["fm.py"]


@pytest.mark.parametrize("name_expr", ["name", "config.module + '.' + name", '"rec.legacy." + name'], ids=["bare", "computed-head", "other-package"])
def test_a_lookup_that_spells_no_package_or_another_one_reaches_nothing_here(tmp_path, name_expr):
    assert findings(_lookup_project(tmp_path, name_expr)) == [] if "legacy" not in name_expr else [
        Path(d.filename).name for d in findings(_lookup_project(tmp_path, name_expr))] == ["old.py"]


# ------------------------------------------------------------------ one registry object, a mapping per kind (MMF)

KIND_REGISTRY = """
class Registry:
    mapping = {"loss_name_mapping": {}, "metric_name_mapping": {}}

    @classmethod
    def register_loss(cls, name):
        def wrap(c):
            cls.mapping["loss_name_mapping"][name] = c
            return c
        return wrap

    @classmethod
    def register_metric(cls, name):
        def wrap(c):
            cls.mapping["metric_name_mapping"][name] = c
            return c
        return wrap

    @classmethod
    def get_loss_class(cls, name):
        return cls.mapping["loss_name_mapping"].get(name, None)


registry = Registry()
"""


def test_a_registry_object_with_a_mapping_per_kind_gives_only_that_kind(tmp_path):
    """MMF's `registry.get_loss_class(name)` reaches what `@registry.register_loss(...)`
    registered, never a BCE metric `@registry.register_metric(...)` put in another mapping."""
    root = write_project(tmp_path, {
        "pkg/__init__.py": "",
        "pkg/registry.py": KIND_REGISTRY,
        "pkg/losses.py": head('@registry.register_loss("focal")', "from .registry import registry\n"),
        "pkg/metrics.py": head('@registry.register_metric("bce")', "from .registry import registry\n").replace("FocalHead", "BCEMetric"),
        "train.py": train("criterion = registry.get_loss_class(cfg.loss)()",
                          "from pkg.registry import registry\nimport pkg.losses, pkg.metrics  # noqa\n").replace(
            "loss = model(x, y)", "loss = criterion(x, y)"),
    })
    found = findings(root)
    assert [Path(d.filename).name for d in found] == ["losses.py"]
    assert "(`FocalHead`, via registry `registry`)" in found[0].message


def test_a_mixin_a_base_class_call_and_a_container_of_losses(tmp_path):
    """The three steps of MMF's training forward: the loop mixin's `self.model` is what the
    trainer deriving from it binds; the model's base class computes the losses in `__call__`
    (its subclass defines `forward`); the losses are appended to an `nn.ModuleList` and called
    in a loop over it. Each step removed, nothing leads to the BCE."""
    files = {
        "pkg/__init__.py": "",
        "pkg/losses.py": head().replace("FocalHead", "BCELossModule") + textwrap.dedent("""

            class Losses(nn.Module):
                def __init__(self, names):
                    super().__init__()
                    self.losses = nn.ModuleList()
                    for name in names:
                        self.losses.append(BCELossModule())

                def forward(self, x, y):
                    total = 0
                    for loss in self.losses:
                        total = total + loss(x, y)
                    return total
        """),
        "pkg/models.py": textwrap.dedent("""
            import torch.nn as nn
            from .losses import Losses

            class BaseModel(nn.Module):
                def __init__(self):
                    super().__init__()
                    self.losses = Losses(["bce"])

                def __call__(self, x, y):
                    out = super().__call__(x)
                    return self.losses(out, y)

            class Net(BaseModel):
                def __init__(self):
                    super().__init__()
                    self.fc = nn.Linear(4, 1)

                def forward(self, x):
                    return self.fc(x)
        """),
        "pkg/loop.py": textwrap.dedent("""
            import torch

            class LoopMixin:
                def step(self, x, y):
                    with torch.autocast("cuda", enabled=self.amp):
                        return self.model(x, y)
        """),
        "pkg/trainer.py": textwrap.dedent("""
            from .loop import LoopMixin
            from .models import Net

            class Trainer(LoopMixin):
                def __init__(self, amp):
                    self.amp = amp
                    self.model = Net().cuda()
        """),
    }
    root = write_project(tmp_path / "all", files)
    found = findings(root)
    assert [f"{Path(d.filename).name}:{d.location.row}" for d in found] == ["losses.py:10"]
    assert "BaseModel.__call__" in " ".join(r.message for r in found[0].related)
    broken = {
        "no-subclass": ("pkg/trainer.py", "class Trainer(LoopMixin):", "class Trainer:"),
        "no-call": ("pkg/models.py", "def __call__(self, x, y):", "def unused(self, x, y):"),
        "no-append": ("pkg/losses.py", "self.losses.append(BCELossModule())", "self.losses.extend([])"),
    }
    for name, (path, old, new) in broken.items():
        changed = dict(files, **{path: files[path].replace(old, new)})
        assert old in files[path]
        assert findings(write_project(tmp_path / name, changed)) == [], name
