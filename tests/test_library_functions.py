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
