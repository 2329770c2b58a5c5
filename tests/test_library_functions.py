"""AMP501 for library code: a public autograd.Function of an importable package runs under its
users' autocast, so it is reported even when the package itself opens no autocast region (as long
as the package anticipates autocast somewhere: a custom_fwd, a region, a GradScaler; one that never
does decides its Functions' dtypes itself, in fp32 or by casting its parameters);
scripts, tests, private classes and folders outside a package still need autocast in the project."""
from __future__ import annotations

import textwrap

import pytest

from amplint import Config
from amplint.engine.run import lint_paths
from amplint.engine.parallel import open_cache
from amplint.model.facts import library_module

FUNCTION = textwrap.dedent(
    """\
    import torch


    class FusedLinear(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x, weight):
            ctx.save_for_backward(x, weight)
            return x @ weight.t()

        @staticmethod
        def backward(ctx, grad):
            x, weight = ctx.saved_tensors
            return grad @ weight, grad.t() @ x
    """
)
CONFIG = Config(select=("AMP501",))
#: a module that anticipates autocast: the package's Functions may run under its users' autocast
HALF = "import torch\nfrom torch.amp import custom_fwd\n\n\n@custom_fwd(device_type='cuda', cast_inputs=torch.float32)\ndef fp32_op(x):\n    return x\n"


def _package(root, relative="fastops/functions.py", source=FUNCTION, init=True):
    path = root / relative
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(source)
    if init:
        (path.parent / "__init__.py").write_text("from .functions import *\n" if path.name == "functions.py" else "")
    return path


def _found(root, config=CONFIG):
    return [(d.filename.replace(str(root), "").lstrip("/"), d.location.row) for d in lint_paths([str(root)], config).diagnostics]


def test_public_function_of_a_package_is_reported_without_autocast_in_the_project(tmp_path):
    _package(tmp_path)
    (tmp_path / "fastops" / "cast.py").write_text(HALF)
    assert _found(tmp_path) == [("fastops/functions.py", 6)]


def test_a_package_that_never_anticipates_autocast_decides_its_dtypes(tmp_path):
    """No autocast, custom_fwd or GradScaler anywhere (fp32-only BasicSR and stylegan2, torchtitan
    with bf16 parameters from FSDP in the blind drill): its own code decides what its Functions
    see, a bf16 model cast included; a `--precision` setting still reports."""
    _package(tmp_path)
    (tmp_path / "fastops" / "train.py").write_text(
        "import torch\n\n\ndef step(model, opt, x):\n    model.to(torch.bfloat16)(x).sum().backward()\n    opt.step()\n"
    )
    assert _found(tmp_path) == []
    (tmp_path / "fastops" / "router.py").write_text("import torch\n\n\ndef route(g, x):\n    with torch.autocast('cuda', dtype=torch.float32):\n        return g(x)\n")
    assert _found(tmp_path) == []
    assert _found(tmp_path, Config(select=("AMP501",), precision="fp16")) == [("fastops/functions.py", 6)]
    (tmp_path / "fastops" / "cast.py").write_text(HALF)
    assert _found(tmp_path) == [("fastops/functions.py", 6)]


def test_the_same_file_outside_a_package_needs_autocast_in_the_project(tmp_path):
    _package(tmp_path, init=False)
    assert _found(tmp_path) == []
    (tmp_path / "fastops" / "train.py").write_text('import torch\nwith torch.autocast("cuda"):\n    y = f(x)\n')
    assert _found(tmp_path) == [("fastops/functions.py", 6)]


@pytest.mark.parametrize(
    "relative,source",
    [
        ("fastops/functions.py", FUNCTION.replace("class FusedLinear", "class _FusedLinear")),
        ("fastops/functions.py", FUNCTION + '\n\nif __name__ == "__main__":\n    run()\n'),
        ("fastops/__main__.py", FUNCTION),
        ("fastops/test_functions.py", FUNCTION),
        ("tests/unit/functions.py", FUNCTION),
        ("examples/fastops/functions.py", FUNCTION),
        ("fastops/functions.py", "import torch\n\ndef build():\n" + textwrap.indent(FUNCTION.split("\n", 2)[2], "    ")),
    ],
    ids=["private", "main-guard", "dunder-main", "test-file", "tests-dir", "examples-dir", "nested-in-function"],
)
def test_scripts_tests_and_private_classes_stay_as_before(tmp_path, relative, source):
    _package(tmp_path, relative, source)
    (tmp_path / "tests").mkdir(exist_ok=True)
    (tmp_path / "tests" / "__init__.py").write_text("")
    assert _found(tmp_path, Config(select=("AMP501",), root=str(tmp_path))) == []


def test_adding_init_py_is_seen_by_a_warm_run(tmp_path):
    """Whether a file is a package module is decided when conditions are resolved, not cached."""
    path = _package(tmp_path, init=False)
    (path.parent / "cast.py").write_text(HALF)
    views = []
    for _ in range(2):
        cache = open_cache(CONFIG, str(tmp_path / "cache"))
        views.append(lint_paths([str(path.parent)], CONFIG, cache=cache).diagnostics)
        cache.save()
        (path.parent / "__init__.py").write_text("")
    assert views[0] == [] and [d.location.row for d in views[1]] == [6]
    assert cache.hits >= 1


def test_library_module(tmp_path):
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    assert library_module(str(pkg / "ops.py"))
    assert library_module(str(pkg / "ops.py"), str(tmp_path))
    assert not library_module(str(pkg / "ops_test.py"))
    assert not library_module(str(pkg / "setup.py"))
    assert not library_module(str(tmp_path / "ops.py"))
    assert not library_module("<string>")
    assert not library_module(str(pkg / "nb.ipynb"))


# --- packages the project distributes, and packages embedded in an application (model/embedded.py)

AUTOCAST_TRAIN = "import torch\n\n\ndef step(model, x):\n    with torch.autocast('cuda', dtype=torch.float16):\n        return model(x)\n"


def test_the_library_clause_needs_a_package_the_project_distributes(tmp_path):
    """An application repository (no packaging metadata) that anticipates autocast but never
    enters it: its Functions run only under its own code, which never autocasts."""
    (tmp_path / ".git").mkdir()
    _package(tmp_path)
    (tmp_path / "fastops" / "cast.py").write_text(HALF)
    assert _found(tmp_path) == []
    (tmp_path / "pyproject.toml").write_text('[project]\nname = "fastops"\n')
    assert _found(tmp_path) == [("fastops/functions.py", 6)]


def test_a_wheel_distributes_its_packages(tmp_path):
    root = tmp_path / "fastops-1.0"
    _package(root)
    (root / "fastops" / "cast.py").write_text(HALF)
    (root / "fastops-1.0.dist-info").mkdir()
    (root / "fastops-1.0.dist-info" / "METADATA").write_text("Name: fastops\n")
    assert _found(root) == [("fastops/functions.py", 6)]


@pytest.mark.parametrize("folder", ["third_party/fastlib", "annotator/seg", "vendor/libs/fastlib"])
def test_a_vendored_copy_nothing_imports_is_not_reached(tmp_path, folder):
    """A library copied into an application (a package below a folder that is not one): its
    Functions' only callers are the application's code; when nothing of it imports the copy,
    they never run, whatever the application's autocast (or the copy's own) does."""
    (tmp_path / ".git").mkdir()
    _package(tmp_path, f"{folder}/fastops/functions.py")
    (tmp_path / folder / "fastops" / "amp.py").write_text(AUTOCAST_TRAIN)  # the copy's own autocast
    (tmp_path / "train.py").write_text(AUTOCAST_TRAIN)
    assert _found(tmp_path) == []


@pytest.mark.parametrize(
    "importer",
    [
        "from {dotted}.fastops import FusedLinear\n",  # the copy's path from the root
        "import sys\nsys.path.insert(0, '{folder}')\nfrom fastops.functions import FusedLinear\n",  # its own name
    ],
)
def test_a_vendored_copy_the_application_imports_is_reached(tmp_path, importer):
    folder = "third_party/fastlib"
    (tmp_path / ".git").mkdir()
    _package(tmp_path, f"{folder}/fastops/functions.py")
    (tmp_path / "models").mkdir()
    (tmp_path / "models" / "__init__.py").write_text("")
    (tmp_path / "models" / "net.py").write_text(importer.format(dotted=folder.replace("/", "."), folder=folder))
    (tmp_path / "train.py").write_text("from models.net import FusedLinear\n" + AUTOCAST_TRAIN)
    assert _found(tmp_path) == [(f"{folder}/fastops/functions.py", 6)]


def test_a_vendored_copy_imported_only_by_fp32_code_is_not_reached(tmp_path):
    """The importer's program never anticipates autocast (a gradio demo of the vendored
    segmenter); the training script that autocasts imports other modules."""
    (tmp_path / ".git").mkdir()
    _package(tmp_path, "annotator/seg/fastops/functions.py")
    (tmp_path / "demo.py").write_text("import torch\nfrom annotator.seg.fastops import FusedLinear\n\nwith torch.no_grad():\n    y = FusedLinear.apply(x, w)\n")
    (tmp_path / "train.py").write_text(AUTOCAST_TRAIN)
    assert _found(tmp_path) == []
    (tmp_path / "demo.py").write_text("import train\n" + (tmp_path / "demo.py").read_text())
    assert _found(tmp_path) == [("annotator/seg/fastops/functions.py", 6)]


def test_a_package_whose_folder_holds_its_own_packaging_is_a_project_of_its_own(tmp_path):
    """An sdist unpacked one folder down (`deepspeed-0.19.8/deepspeed-0.19.8/setup.py`, the run's
    root above it): not an embedded copy, its public Functions are library code."""
    inner = tmp_path / "fastops-1.0"
    _package(inner)
    (inner / "fastops" / "cast.py").write_text(HALF)
    (inner / "setup.py").write_text("from setuptools import setup\nsetup(name='fastops')\n")
    assert _found(tmp_path, Config(select=("AMP501",), root=str(tmp_path))) == [("fastops-1.0/fastops/functions.py", 6)]


# --- a library copy nested in a top-level package of the application (`__init__.py` all the way up)

NESTED = "app/annotator/uniformer/fastops"


def _nested(root, marker):
    """`app/annotator/uniformer/fastops/` with `__init__.py` in every folder; `marker` says how
    the copy shows it is a separate library."""
    (root / ".git").mkdir()
    for folder in ("app", "app/annotator", "app/annotator/uniformer"):
        (root / folder).mkdir(parents=True, exist_ok=True)
        (root / folder / "__init__.py").write_text("")
    _package(root, f"{NESTED}/functions.py")
    copy = root / NESTED
    if marker == "version":
        (copy / "version.py").write_text("__version__ = '1.3.17'\n")
    elif marker == "license":
        (copy / "LICENSE").write_text("Apache License 2.0\n")
    elif marker == "self-import":
        (copy / "utils.py").write_text("import importlib\n\next = importlib.import_module('fastops._ext')\n")
    elif marker == "from-self":
        (copy / "ops.py").write_text("from fastops.functions import FusedLinear\n")
    (copy / "amp.py").write_text(AUTOCAST_TRAIN)  # the copy's own autocast
    (root / "train.py").write_text(AUTOCAST_TRAIN)
    return copy


@pytest.mark.parametrize("marker", ["version", "license", "self-import", "from-self"])
def test_a_nested_vendored_copy_nothing_imports_is_not_reached(tmp_path, marker):
    _nested(tmp_path, marker)
    assert _found(tmp_path) == []


@pytest.mark.parametrize("marker", ["version", "from-self"])
def test_a_nested_vendored_copy_the_application_imports_under_autocast_is_reached(tmp_path, marker):
    _nested(tmp_path, marker)
    (tmp_path / "train.py").write_text("from app.annotator.uniformer.fastops import FusedLinear\n" + AUTOCAST_TRAIN)
    assert _found(tmp_path) == [(f"{NESTED}/functions.py", 6)]


def test_a_nested_copy_reached_through_its_own_absolute_imports(tmp_path):
    """The application imports the copy's `ops` module, which imports the Function by the copy's
    own top-level name (`from fastops.functions import ...`): the graph resolves it in the copy."""
    _nested(tmp_path, "from-self")
    (tmp_path / NESTED / "__init__.py").write_text("")
    (tmp_path / "train.py").write_text("from app.annotator.uniformer.fastops import ops\n" + AUTOCAST_TRAIN)
    assert _found(tmp_path) == [(f"{NESTED}/functions.py", 6)]


def test_an_applications_own_subpackage_is_not_a_copy(tmp_path):
    """No marker, no import of itself by a name the project lacks: the application's own
    subpackage, reported under its autocast whether or not anything imports it."""
    _nested(tmp_path, None)
    assert _found(tmp_path) == [(f"{NESTED}/functions.py", 6)]


def test_a_name_the_project_has_at_its_root_is_no_copy(tmp_path):
    """`from fastops...` resolves to the project's own top-level `fastops`: not a sign of a copy."""
    _nested(tmp_path, "from-self")
    _package(tmp_path, "fastops/other.py", source="")
    assert (f"{NESTED}/functions.py", 6) in _found(tmp_path)


@pytest.mark.parametrize(
    "packaging, reported",
    [
        ("[project]\nname = 'app'\n", True),  # automatic discovery distributes every package
        ("from setuptools import setup\nsetup(name='app', packages=['app', 'app.annotator', 'app.annotator.uniformer', 'app.annotator.uniformer.fastops'])\n", True),
        ("from setuptools import setup\nsetup(name='app', packages=['app', 'app.models'])\n", False),
        ("[tool.black]\nline-length = 120\n", False),  # tool settings only: no distribution
    ],
)
def test_a_nested_copy_the_packaging_distributes_stays_library_code(tmp_path, packaging, reported):
    _nested(tmp_path, "version")
    name = "setup.py" if packaging.startswith("from setuptools") else "pyproject.toml"
    (tmp_path / name).write_text(packaging)
    assert _found(tmp_path) == ([(f"{NESTED}/functions.py", 6)] if reported else [])


# --- where autocast can meet a Function: the programs that load its file (model/embedded.py)

ARCHIVED = "import torch\nfrom torch import nn\n\nmodel = nn.Linear(8, 8).cuda()\nctx = torch.amp.autocast(device_type='cuda', dtype=torch.bfloat16)\nwith ctx:\n    loss = model(x).sum()\n"


def _application(root):
    """modded-nanogpt's shape: `kernels.py` holds the Function, `train.py` (a script) imports it
    and enters no autocast; the only autocast is an archived, self-contained record script."""
    (root / ".git").mkdir()
    (root / "kernels.py").write_text(FUNCTION)
    (root / "train.py").write_text("from kernels import FusedLinear\n\ny = FusedLinear.apply(x.bfloat16(), w.bfloat16())\n")
    (root / "records" / "2024_run").mkdir(parents=True)
    (root / "records" / "2024_run" / "train_gpt2.py").write_text(ARCHIVED)


def test_an_autocast_in_a_program_that_never_loads_the_function_does_not_reach_it(tmp_path):
    _application(tmp_path)
    assert _found(tmp_path) == []
    assert _found(tmp_path, Config(select=("AMP501",), precision="bf16")) == [("kernels.py", 6)]  # the setting: every program
    (tmp_path / "train.py").write_text("import torch\n" + (tmp_path / "train.py").read_text() + AUTOCAST_TRAIN)
    assert _found(tmp_path) == [("kernels.py", 6)]


def test_a_program_sharing_an_importer_with_the_autocast_reaches_the_function(tmp_path):
    _application(tmp_path)
    (tmp_path / "amp.py").write_text(AUTOCAST_TRAIN)
    assert _found(tmp_path) == []
    (tmp_path / "train.py").write_text("import amp\n" + (tmp_path / "train.py").read_text())
    assert _found(tmp_path) == [("kernels.py", 6)]


@pytest.mark.parametrize(
    "loader",
    [
        "",  # `models/net.py`, a package module nothing imports: a registry or a config loads it
        "import importlib\nimport models.net\nnet = importlib.import_module(cfg.model)\n",  # a program loading by name
    ],
)
def test_a_program_the_imports_cannot_tell_is_reached(tmp_path, loader):
    _application(tmp_path)
    (tmp_path / "models").mkdir()
    (tmp_path / "models" / "__init__.py").write_text("")
    (tmp_path / "models" / "net.py").write_text("from kernels import FusedLinear\n")
    (tmp_path / "main.py").write_text(loader)
    assert _found(tmp_path) == [("kernels.py", 6)]
    if loader:
        (tmp_path / "main.py").write_text("import models.net\n")
        assert _found(tmp_path) == []


def test_a_subproject_is_reached_through_the_checkout_holding_it(tmp_path):
    """detectron2's `projects/TensorMask`: its own `setup.py`, its `train_net.py` importing both
    its ops and the repository's trainer, which autocasts."""
    (tmp_path / ".git").mkdir()
    _package(tmp_path, "detlib/engine.py", AUTOCAST_TRAIN)
    sub = tmp_path / "projects" / "Mask"
    _package(sub, "masklib/ops.py", FUNCTION.replace("FusedLinear", "_FusedLinear"))
    (sub / "setup.py").write_text("from setuptools import setup\nsetup(name='masklib')\n")
    (sub / "train_net.py").write_text("from masklib.ops import _FusedLinear\n")
    assert _found(tmp_path) == []
    (sub / "train_net.py").write_text("from detlib.engine import step\nfrom masklib.ops import _FusedLinear\n")
    assert _found(tmp_path) == [("projects/Mask/masklib/ops.py", 6)]


@pytest.mark.parametrize(
    "source, enters",
    [
        ("import torch\nwith torch.autocast('cuda'):\n    pass\n", True),
        ("import torch\nctx = torch.amp.autocast(device_type='cuda', dtype=torch.bfloat16)\n", True),  # entered elsewhere
        ("from functools import partial\nimport torch\namp = partial(torch.autocast, 'cuda')\n", True),  # held
        ("def f():\n    from torch.cuda.amp import autocast\n    with autocast():\n        pass\n", True),
        ("def f(accelerator):\n    with accelerator.autocast():\n        pass\n", True),
        ("import pytorch_lightning as pl\npl.Trainer(precision='16-mixed')\n", True),
        ("import pytorch_lightning as pl\npl.Trainer(precision=args.precision)\n", True),
        ("from accelerate import Accelerator\nAccelerator()\n", True),  # the accelerate config decides
        ("from transformers import TrainingArguments\nTrainingArguments('out', bf16=True)\n", True),
        ("import torch\nclass F(torch.autograd.Function):\n    def backward(ctx, g):\n        with torch.autocast('cuda'):\n            pass\n", True),
        ("import torch\nwith torch.autocast('cuda', enabled=False):\n    pass\n", False),
        ("import torch\nwith torch.autocast('cuda', dtype=torch.float32):\n    pass\n", False),
        # a checkpoint Function's backward replays what its forward ran under
        ("import torch\nclass F(torch.autograd.Function):\n    def backward(ctx, g):\n        with torch.cuda.amp.autocast(**ctx.kw):\n            pass\n", False),
        ("import torch\nclass F(torch.autograd.Function):\n    def backward(ctx, g):\n        with torch.autocast('cuda', enabled=ctx.on):\n            pass\n", False),
        ("import pytorch_lightning as pl\npl.Trainer(gpus=1, precision=32)\n", False),
        ("from accelerate import Accelerator\nAccelerator(mixed_precision='no')\n", False),
        ("from transformers import TrainingArguments\nTrainingArguments('out', fp16=False)\n", False),
        ("x = 1  # precision\n", False),
    ],
)
def test_which_files_may_enter_autocast(source, enters):
    from amplint.model.project.entries import enters_autocast

    assert enters_autocast(source) is enters


def _old_own_regex(name):
    """The one regex `_is_copy` used before `_own_imports` (the reference its answers equal)."""
    import re

    return re.compile(
        r"^[ \t]*(?:from[ \t]+%s(?:\.[\w.]+)?[ \t]+import\b|import[ \t]+%s(?:\.|[ \t]*$|[ \t]+as\b|[ \t]*,))"
        r"|import_module\(\s*[rbuf]?['\"]%s\." % ((re.escape(name),) * 3),
        re.MULTILINE,
    )


_OWN_LINES = [
    "from mmcv.utils import x", "  from mmcv import x", "\tfrom\tmmcv.ops.a  import b", "from mmcv import(x)",
    "import mmcv", "import mmcv.ops", "    import mmcv as m", "import mmcv, os", "import mmcv  ", "import mmcvx",
    "from mmcvx import a", "from .mmcv import a", "from ..mmcv.x import a", "x = 1; from mmcv import a",
    "# from mmcv import a", "y = 'import mmcv'", "import import mmcv", "from mmcv importx", "from mmcv.  import a",
    "importlib.import_module('mmcv.ops')", "import_module(\n  f\"mmcv.\" + n)", "import_module('mmcvx.a')",
    "import_module(mmcv.a)", "from os import mmcv", "import os, mmcv", "fromm mmcv import a", "importmmcv",
    "\n\nimport mmcv\r\n", "from mmcv.a.b import c as d", "  import\tmmcv.", "",
]


@pytest.mark.parametrize("prefix", ["", "x = 1\n", "from mmcv\n", "import os\n    \n", "import mmcv_extra\n"])
def test_own_imports_answers_as_the_one_regex(prefix):
    from amplint.model.embedded import _own_imports

    own, old = _own_imports("mmcv"), _old_own_regex("mmcv")
    found = 0
    for line in _OWN_LINES:
        for text in (prefix + line, prefix + line + "\n" + line, line + "\n" + prefix):
            assert own(text) == bool(old.search(text)), text
            found += own(text)
    assert found  # the cases hold imports the test finds, and others it does not


# --- subprojects of a monorepo: each its own packaging below the checkout's `.git`

REGISTRY = "import importlib\n\n\ndef build(name):\n    return importlib.import_module('fastops.models.' + name)\n"


def _fairseq_copy(root, folder, trainer):
    """microsoft/unilm's shape: a copy of one package (`fastops`, fairseq) in the subproject
    `folder` with its own `setup.py`; its kernel's Function in a subpackage that holds the
    kernel's build script (`fastops/ops/conv/setup.py`, fairseq's `modules/dynamicconv_layer/`),
    applied by a model a registry loads by name; `trainer` is the copy's training step."""
    sub = root / folder
    _package(sub, "fastops/ops/conv/conv_layer.py", FUNCTION)
    (sub / "fastops" / "__init__.py").write_text("")
    (sub / "fastops" / "ops" / "__init__.py").write_text("")
    (sub / "fastops" / "ops" / "conv" / "setup.py").write_text("from setuptools import setup\nsetup(name='conv_layer', ext_modules=[])\n")
    _package(sub, "fastops/models/net.py", "from fastops.ops.conv.conv_layer import FusedLinear\n")
    (sub / "fastops" / "models" / "__init__.py").write_text(REGISTRY)
    (sub / "fastops" / "trainer.py").write_text(trainer)
    (sub / "setup.py").write_text("from setuptools import setup\nsetup(name='fastops')\n")
    (sub / "train.py").write_text("from fastops.models import build\nfrom fastops.trainer import step\n")
    (sub / "tests").mkdir()
    (sub / "tests" / "test_train.py").write_text("import train\n")  # a bare name: its own train.py


def test_a_sibling_subprojects_autocast_does_not_reach_a_copy_that_never_anticipates_it(tmp_path):
    """Two copies of one package in sibling subprojects of a checkout: the one whose training
    step autocasts (edgelm's fairseq) is library code under autocast; the other's (decoding/GAD's
    fairseq: fp16 by `model.half()`, no autocast anywhere in it) cannot import the first and
    runs none of its code, so its kernel sees what its own code gives it."""
    (tmp_path / ".git").mkdir()
    _fairseq_copy(tmp_path, "amp_lm", AUTOCAST_TRAIN)
    _fairseq_copy(tmp_path, "decoding/half_lm", "def step(model, x):\n    return model.half()(x.half())\n")
    assert _found(tmp_path) == [("amp_lm/fastops/ops/conv/conv_layer.py", 6)]
    # the copy's own autocast: it anticipates it, and a program of it enters it
    (tmp_path / "decoding" / "half_lm" / "fastops" / "trainer.py").write_text(AUTOCAST_TRAIN)
    assert sorted(_found(tmp_path)) == [("amp_lm/fastops/ops/conv/conv_layer.py", 6), ("decoding/half_lm/fastops/ops/conv/conv_layer.py", 6)]


@pytest.mark.parametrize("importer", ["from fastops.models import build\n", "import fastops.models.net\n"])
def test_a_subproject_the_checkouts_autocast_runs_is_reached(tmp_path, importer):
    """A subproject that never anticipates autocast is still reached by a program of the checkout
    that autocasts and runs its code: by a registry it imports (which model is not known), or by
    importing the Function's module itself."""
    (tmp_path / ".git").mkdir()
    _fairseq_copy(tmp_path, "lib", "def step(model, x):\n    return model(x)\n")
    (tmp_path / "train.py").write_text("import torch\n" + importer + AUTOCAST_TRAIN)
    assert _found(tmp_path) == [("lib/fastops/ops/conv/conv_layer.py", 6)]
    (tmp_path / "train.py").write_text("import torch\n" + AUTOCAST_TRAIN)
    assert _found(tmp_path) == []


HALF_STEP = "def step(model, x):\n    return model.half()(x.half())\n"


@pytest.mark.parametrize(
    "script, reaches",
    [
        # an installed copy: both are equally near the script, so which one it imports is not known
        ("from fastops.models import build\n", False),
        # a bare name both copies hold, with no path to either (a URL ending in the folder's name is none)
        ("# after https://github.com/org/half_lm\nimport trainer\n", False),
        # a bare name found on a path the script adds: that copy's
        ("import sys\nsys.path.append('../decoding/half_lm/fastops')\nimport trainer\n", True),
    ],
)
def test_a_script_outside_every_copy_reaches_a_copy_only_by_its_path(tmp_path, script, reaches):
    """A script of the checkout outside both copies (`YOCO/`, `speechlm/` importing fairseq, which
    they install) that autocasts: `fastops.models` names no copy by itself (not the first one in
    the listing's order), nor does a bare `import trainer`; a path to one does."""
    (tmp_path / ".git").mkdir()
    _fairseq_copy(tmp_path, "lm/amp", AUTOCAST_TRAIN)
    _fairseq_copy(tmp_path, "decoding/half_lm", HALF_STEP)
    (tmp_path / "scripts").mkdir()
    (tmp_path / "scripts" / "amp_eval.py").write_text("import torch\n" + script + AUTOCAST_TRAIN)
    expected = [("lm/amp/fastops/ops/conv/conv_layer.py", 6)]
    if reaches:
        expected.insert(0, ("decoding/half_lm/fastops/ops/conv/conv_layer.py", 6))
    assert sorted(_found(tmp_path)) == expected
