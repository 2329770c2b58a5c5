"""AMP501 on a Function that only the file's own entry points apply: a test module's (or a
script's) Function applied by its `test*` functions, or by functions nested in them, to inputs
they build, in a file that enters no autocast (Megatron-LM's `_ViewSavingLinear` in
tests/unit_tests/tensor_parallel/test_random.py). The project's autocast elsewhere, imported
by the test, cannot wrap those calls; a `conftest.py` fixture entering autocast, a module
importing the test, or an autocast in the file itself can, and keep the finding."""
from __future__ import annotations

import textwrap

from amplint import Config
from amplint.engine.run import lint_paths

CONFIG = Config(select=("AMP501",))

#: a training module that enters autocast, which the test imports
TRAINER = textwrap.dedent(
    """\
    import torch


    def train_step(model, x):
        with torch.autocast("cuda", dtype=torch.float16):
            return model(x).sum()
    """
)

TEST = textwrap.dedent(
    """\
    import torch

    from pkg.trainer import train_step


    class _ViewSavingLinear(torch.autograd.Function):
        @staticmethod
        def forward(ctx, inp, weight):
            ctx.save_for_backward(inp, weight)
            return inp.matmul(weight.t())

        @staticmethod
        def backward(ctx, grad_output):
            inp, weight = ctx.saved_tensors
            return grad_output.matmul(weight), grad_output.t().matmul(inp)


    def test_view_sharing():
        def normal_forward(input_, weight):
            return _ViewSavingLinear.apply(torch.nn.functional.gelu(input_), weight)

        x = torch.randn(3, 8, requires_grad=True)
        w = torch.randn(6, 8, requires_grad=True)
        normal_forward(x, w).sum().backward()


    class TestLinear:
        def test_direct(self):
            _ViewSavingLinear.apply(torch.randn(2, 8), torch.randn(4, 8))
    """
)


def _project(root, test=TEST, conftest=None, importer=None):
    (root / "pkg").mkdir()
    (root / "pkg" / "__init__.py").write_text("")
    (root / "pkg" / "trainer.py").write_text(TRAINER)
    (root / "tests").mkdir()
    (root / "tests" / "test_linear.py").write_text(test)
    if conftest is not None:
        (root / "tests" / "conftest.py").write_text(conftest)
    if importer is not None:
        (root / "tests" / "test_other.py").write_text(importer)
    (root / "setup.py").write_text("from setuptools import setup\nsetup(name='pkg')\n")


def _found(root):
    return [(d.filename.replace(str(root), "").lstrip("/"), d.location.row) for d in lint_paths([str(root)], CONFIG).diagnostics]


def test_a_tests_own_function_on_inputs_it_built_is_silent(tmp_path):
    _project(tmp_path)
    assert _found(tmp_path) == []


def test_an_autouse_fixture_entering_autocast_keeps_it(tmp_path):
    conftest = textwrap.dedent(
        """\
        import pytest
        import torch


        @pytest.fixture(autouse=True)
        def amp():
            with torch.autocast("cuda", dtype=torch.float16):
                yield
        """
    )
    _project(tmp_path, conftest=conftest)
    assert _found(tmp_path) == [("tests/test_linear.py", 8)]


def test_a_module_importing_the_test_keeps_it(tmp_path):
    importer = "import torch\nfrom tests.test_linear import test_view_sharing\n\n\ndef test_amp():\n    with torch.autocast('cuda'):\n        test_view_sharing()\n"
    _project(tmp_path, importer=importer)
    assert _found(tmp_path) == [("tests/test_linear.py", 8)]


def test_an_autocast_in_the_test_itself_keeps_it(tmp_path):
    test = TEST + "\n\ndef test_amp():\n    with torch.autocast('cuda'):\n        pass\n"
    _project(tmp_path, test=test)
    assert _found(tmp_path) == [("tests/test_linear.py", 8)]


def test_an_applying_function_passed_on_as_a_value_keeps_it(tmp_path):
    """`run(normal_forward)`: what `run` does with it (an autocast of its own) is not shown."""
    test = TEST.replace("normal_forward(x, w).sum().backward()", "train_step(normal_forward, x)")
    _project(tmp_path, test=test)
    assert _found(tmp_path) == [("tests/test_linear.py", 8)]


def test_a_function_a_module_applies_in_forward_keeps_it(tmp_path):
    """A module's `forward` runs wherever the module is called (`train_step(model, x)`)."""
    test = TEST + textwrap.dedent(
        """

        class Net(torch.nn.Module):
            def forward(self, x):
                return _ViewSavingLinear.apply(x, x)


        def test_net():
            train_step(Net(), torch.randn(2, 2))
        """
    )
    _project(tmp_path, test=test)
    assert _found(tmp_path) == [("tests/test_linear.py", 8)]
